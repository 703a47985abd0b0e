"""cosmos-serve: NVIDIA Cosmos-Reason1 (Qwen2.5-VL) video reasoning for camera fleets on Ray Serve."""

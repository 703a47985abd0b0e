"""Clip decoding with PyAV: containers, the player's timeline, the passes over packets, sampling, frames,
live capture, and the vision tower's input (:mod:`.vision_patches`). Ray-free."""

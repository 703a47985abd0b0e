"""Facts about the Qwen3-VL family: Qwen3-VL-2B/8B-Instruct, NVIDIA Cosmos-Reason2-2B/8B, Cosmos 3 reasoners.

Cosmos-Reason2 is post-trained from Qwen3-VL (its README: "Cosmos-Reason2 is based on the Qwen3-VL
architecture"; its scripts load it as ``Qwen3VLForConditionalGeneration`` + ``Qwen3VLProcessor``).
The Cosmos 3 reasoners load in vLLM as ``Cosmos3ForConditionalGeneration``, a subclass of
``Qwen3VLForConditionalGeneration`` (vLLM ``model_executor/models`` plugin ``vllm_cosmos3``), and
follow "Qwen3-VL-compatible message conventions" (NVIDIA/cosmos ``README.md``). As in
:mod:`serve_app.model_facts` (Qwen2.5-VL), every number is written once with the file it comes
from. No machine of this project reaches the model hub, so the hub files were read through stored
copies in public repositories; where a fact comes from a copy and not from the model's own hub file,
or could not be checked at all, its comment says so.

Sources:

* transformers 5.24 (the venv): ``models/qwen3_vl/video_processing_qwen3_vl.py`` (video processor
  defaults, ``smart_resize``), ``models/qwen3_vl/processing_qwen3_vl.py`` (``<x.y seconds>``
  timestamps), ``models/auto/image_processing_auto.py`` (qwen3_vl → ``Qwen2VLImageProcessor``).
* Qwen/Qwen3-VL-8B-Instruct ``config.json``: the copy in NVIDIA TensorRT-LLM's
  ``tests/unittest/_torch/modeling/test_modeling_qwen3vl.py`` (``QWEN3_VL_8B_CONFIG``,
  ``_name_or_path`` Qwen3-VL-8B-Instruct, ``num_hidden_layers`` cut to 4 there, "36 layers for full
  model"). The same numbers appear in several other stored copies (a Cosmos-Reason2-8B restatement
  among them).
* Qwen3-VL-8B-Instruct chat template: zhongkaifu/TensorSharp
  ``InferenceWeb.Tests/QwenImageIntentScorerTests.cs`` quotes ``tokenizer.chat_template`` of
  ``Qwen/Qwen3-VL-8B-Instruct-GGUF`` (byte-identical to unsloth's GGUF) and pins its size, 5292
  bytes, and SHA-256 (:data:`CHAT_TEMPLATE_SHA256`); :data:`CHAT_TEMPLATE` matches both. The
  JSON-encoded ``qwen3-vl`` template of another stored registry (a Python chat-template registry)
  is the same text.
* Qwen3 tokenizer (added tokens, flags, NFC, regex, ``model_max_length``): a stored dump of
  Qwen3-4B's ``tokenizer_config.json`` / ``tokenizer.json``; the Qwen3-VL tokenizers add no token.
* nvidia-cosmos/cosmos-reason2 @ a3b4a1d (2026-06-07): ``README.md``, ``scripts/inference_sample.py``,
  ``cosmos_reason2_utils/cosmos_reason2_utils/{text,vision}.py``,
  ``cosmos_reason2_utils/cosmos_reason2_utils/script/inference.py``, ``configs/inference_config.yaml``.
* NVIDIA/cosmos @ aca7057 (2026-06-13): ``README.md`` (Reasoner sampling table),
  ``cookbooks/cosmos3/reasoner/reasoner_prompt_guide.md``.

:data:`CHAT_TEMPLATE` is what the generated checkpoints carry; the one renderer of chat templates is
:func:`serve_app.model.family.render_chat`.
"""

# The verbatim chat template below has two lines longer than the limit; it is kept byte for byte.
# ruff: noqa: E501

from __future__ import annotations

from typing import Any

from serve_app.model_facts import ADDED_TOKENS as QWEN2_ADDED_TOKENS

# the shared token ids, re-exported (``X as X``) for this family's users
from serve_app.model_facts import ENDOFTEXT_TOKEN_ID as ENDOFTEXT_TOKEN_ID
from serve_app.model_facts import IM_END_TOKEN_ID as IM_END_TOKEN_ID
from serve_app.model_facts import IMAGE_TOKEN_ID as IMAGE_TOKEN_ID
from serve_app.model_facts import VIDEO_TOKEN_ID as VIDEO_TOKEN_ID
from serve_app.model_facts import VISION_END_TOKEN_ID as VISION_END_TOKEN_ID
from serve_app.model_facts import VISION_START_TOKEN_ID as VISION_START_TOKEN_ID
from serve_app.model_facts import VISION_TOKEN_ID as VISION_TOKEN_ID

# --- Vision geometry (preprocessor_config.json / video_preprocessor_config.json; vision_config) ----

#: Side of a vision patch, pixels (``patch_size`` 16; Qwen2.5-VL has 14).
PATCH_SIZE = 16
#: Patches merged per side into one LLM token (``merge_size`` / vision_config ``spatial_merge_size``).
SPATIAL_MERGE_SIZE = 2
#: Frames per temporal patch (``temporal_patch_size``): videos are read in frame pairs.
TEMPORAL_PATCH_SIZE = 2
#: Frame sides are multiples of this many pixels: ``PATCH_SIZE · SPATIAL_MERGE_SIZE`` = 32.
PIXEL_FACTOR = PATCH_SIZE * SPATIAL_MERGE_SIZE
#: Pixels per LLM vision token: 32² = 1024 (cosmos_reason2_utils ``vision.py`` ``PIXELS_PER_TOKEN``).
PIXELS_PER_TOKEN = PIXEL_FACTOR**2
#: Per-channel RGB normalisation, transformers' ``IMAGENET_STANDARD_MEAN`` / ``_STD`` (the
#: Qwen3VLVideoProcessor class defaults; the published processor configs write [0.5, 0.5, 0.5]).
IMAGE_MEAN = (0.5, 0.5, 0.5)
IMAGE_STD = (0.5, 0.5, 0.5)

#: Image processor pixel bounds per image (``preprocessor_config.json`` ``size``): 65536 (256²) to
#: 16777216 (4096²). From stored copies of the Qwen3-VL processor contract (a Qwen3-VL-32B-based
#: checkpoint's and Qwen3.5's files, the same processor); not read from Qwen3-VL-8B's own file.
IMAGE_MIN_PIXELS = 65536
IMAGE_MAX_PIXELS = 16777216
#: Video processor ``size`` of the published ``video_preprocessor_config.json``: bounds of
#: ``t·h·w`` over the whole clip (t frames × h × w pixels; ``smart_resize`` in
#: ``video_processing_qwen3_vl.py`` scales h, w so that ``t·h·w`` falls in [shortest, longest]).
#: 4096 to 25165824 (= 768·32²·32); same provenance as the image bounds.
VIDEO_SHORTEST_EDGE = 4096
VIDEO_LONGEST_EDGE = 25165824
#: transformers' class defaults when no config overrides them (``Qwen3VLVideoProcessor.size``):
#: 128·32² = 131072 to 768·32² = 786432; ``fps`` 2, ``min_frames`` 4, ``max_frames`` 768.
VIDEO_CLASS_SHORTEST_EDGE = 128 * PIXEL_FACTOR**2
VIDEO_CLASS_LONGEST_EDGE = 768 * PIXEL_FACTOR**2
VIDEO_CLASS_FPS = 2.0
VIDEO_MIN_FRAMES = 4
VIDEO_MAX_FRAMES = 768

# --- Token ids (config.json, tokenizer_config.json) ------------------------------------------------

# Qwen3's tokenizer keeps Qwen2.5's added tokens 151643-151664 with the same ids and flags (Qwen3-4B's
# tokenizer.json, compared entry by entry): their ids are Qwen2.5's, imported from serve_app.model_facts.
# ``<|endoftext|>`` is text_config ``bos_token_id`` and the pad token, ``<|im_end|>`` text_config
# ``eos_token_id``; the processor expands one ``<|video_pad|>`` into one token per merged patch of each
# frame pair.
#: ``<think>`` / ``</think>``: plain added tokens (``special`` false: kept by ``skip_special_tokens``).
THINK_OPEN_TOKEN_ID = 151667
THINK_CLOSE_TOKEN_ID = 151668
#: Embedding rows (text_config ``vocab_size`` 151936; ids above 151668 are unused).
VOCAB_SIZE = 151936
#: tokenizer_config.json ``model_max_length``, tokens (Qwen3's; = text_config ``max_position_embeddings``).
MODEL_MAX_LENGTH = 262144

#: (id, content, special) of every Qwen3 added token (tokenizer.json ``added_tokens``): Qwen2.5's 22
#: (:data:`serve_app.model_facts.ADDED_TOKENS`: 151643-151656 special, 151657-151664 not), then Qwen3's four
#: new non-special ones, ``<tool_response>``, ``</tool_response>``, ``<think>``, ``</think>``.
ADDED_TOKENS: tuple[tuple[int, str, bool], ...] = (
    *QWEN2_ADDED_TOKENS,
    (151665, "<tool_response>", False),
    (151666, "</tool_response>", False),
    (THINK_OPEN_TOKEN_ID, "<think>", False),
    (THINK_CLOSE_TOKEN_ID, "</think>", False),
)
# The BPE ranks and the pre-tokenizer are Qwen2.5's: Qwen3's tokenizer.json has the same NFC
# normaliser, the same split regex (serve_app.model_facts.PRETOKENIZE_REGEX, compared character by
# character with the stored Qwen3-4B tokenizer.json) and ignore_merges false; the added tokens start
# at 151643 in both, so both have 151,643 ranks. That the ranks themselves are identical is inferred
# (same size, same first added ids), not compared: no stored Qwen3 vocab.json/merges.txt was read.

# --- Architecture (config.json) --------------------------------------------------------------------

#: Qwen3-VL-8B-Instruct = Cosmos-Reason2-8B text_config (model_type ``qwen3_vl_text``).
TEXT_8B: dict[str, Any] = {
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-06,
    "rope_theta": 5000000,
    "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
    "max_position_embeddings": 262144,
    "attention_bias": False,
    "tie_word_embeddings": False,
}
#: Qwen3-VL-8B-Instruct vision_config (model_type ``qwen3_vl``): SigLIP-2-style ViT, DeepStack taps.
VISION_8B: dict[str, Any] = {
    "depth": 27,
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "num_heads": 16,
    "out_hidden_size": 4096,
    "num_position_embeddings": 2304,
    "deepstack_visual_indexes": [8, 16, 24],
    "hidden_act": "gelu_pytorch_tanh",
    "in_channels": 3,
    "patch_size": PATCH_SIZE,
    "spatial_merge_size": SPATIAL_MERGE_SIZE,
    "temporal_patch_size": TEMPORAL_PATCH_SIZE,
}
#: Qwen3-VL-2B (= Cosmos-Reason2-2B) differences from the 8B. From third-party stored copies of a
#: 2B-shaped config (hidden 2048, 28 layers, tied embeddings); not checked against the hub file.
TEXT_2B_OVERRIDES: dict[str, Any] = {
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "tie_word_embeddings": True,
}
VISION_2B_OVERRIDES: dict[str, Any] = {
    "depth": 24,
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "out_hidden_size": 2048,
    "deepstack_visual_indexes": [5, 11, 17],
}

# --- Chat format (chat_template.json) -------------------------------------------------------------

#: What one video becomes in the prompt text (the chat template's video branch); the processor then
#: writes ``<t seconds>`` before each frame pair's ``<|vision_start|>…<|vision_end|>``.
VIDEO_PLACEHOLDER = "<|vision_start|><|video_pad|><|vision_end|>"
#: SHA-256 of :data:`CHAT_TEMPLATE` (UTF-8) as pinned by the stored copy (5292 bytes).
CHAT_TEMPLATE_SHA256 = "3636d0f0bd6bef02654cdffdc447b79cb2cef8ab02cc75267345946291a489e4"

#: The Qwen3-VL-Instruct chat template, verbatim (see the module docstring for the copy and its pinned
#: hash). Cosmos-Reason2's own ``chat_template.json`` could not be read (no hub access): its scripts
#: render with the checkpoint's template and ``add_generation_prompt=True`` and ask for ``<think>``
#: in the user turn, which fits this Instruct template (no default system turn, generation prompt
#: ``<|im_start|>assistant\n`` without ``<think>``); that Cosmos-Reason2 ships exactly this text is
#: an assumption. Unlike Qwen2.5-VL's template there is no default system prompt, system content may
#: be a list of text parts, and assistant turns may carry ``tool_calls``.
CHAT_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {%- if messages[0].content is string %}
            {{- messages[0].content }}
        {%- else %}
            {%- for content in messages[0].content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' }}
        {%- if messages[0].content is string %}
            {{- messages[0].content }}
        {%- else %}
            {%- for content in messages[0].content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set image_count = namespace(value=0) %}
{%- set video_count = namespace(value=0) %}
{%- for message in messages %}
    {%- if message.role == "user" %}
        {{- '<|im_start|>' + message.role + '\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role + '\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content_item in message.content %}
                {%- if 'text' in content_item %}
                    {{- content_item.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and message.content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

# --- Cosmos-Reason2 recipe (nvidia-cosmos/cosmos-reason2) ------------------------------------------

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

#: The recipe's system prompt (``text.py`` ``SYSTEM_PROMPT``, ``configs/inference_config.yaml``,
#: ``scripts/inference_sample.py``), also the Cosmos 3 reasoner's (``reasoner_prompt_guide.md``).
COSMOS_SYSTEM_PROMPT = "You are a helpful assistant."
#: The reasoning add-on, verbatim (``text.py`` ``REASONING_PROMPT``; ``script/inference.py`` appends
#: it to the user prompt after a blank line: ``user_prompt += f"\n\n{REASONING_PROMPT}"``). The
#: Cosmos 3 prompt guide gives the same text, "append … after the task text". An older revision of
#: the cosmos-reason2 repository (``prompts/addons/reasoning.txt``, appended to the *system* prompt)
#: asked for ``<think>…</think>`` then ``<answer>…</answer>``; the current one asks for no answer tags.
COSMOS_REASONING_PROMPT = (
    "Answer the question using the following format:\n\n"
    f"{THINK_OPEN}\nYour reasoning.\n{THINK_CLOSE}\n\n"
    f"Write your final answer immediately after the {THINK_CLOSE} tag."
)
#: Frames per second of the recipe's videos (``scripts/inference_sample.py`` ``fps=4``, README
#: ``--fps 4``; Cosmos 3: ``mm_processor_kwargs {"fps": 4}``). The repository's older
#: ``configs/vision_config.yaml`` had ``fps: 1``.
COSMOS_FPS = 4.0
#: Vision-token budget of ``inference_sample.py``: 256 to 8192 tokens per image / video, written as
#: processor ``size`` = tokens · :data:`PIXELS_PER_TOKEN` (262144 to 8388608 pixels of t·h·w).
COSMOS_MIN_VISION_TOKENS = 256
COSMOS_MAX_VISION_TOKENS = 8192
COSMOS_MIN_PIXELS = COSMOS_MIN_VISION_TOKENS * PIXELS_PER_TOKEN
COSMOS_TOTAL_PIXELS = COSMOS_MAX_VISION_TOKENS * PIXELS_PER_TOKEN
#: Output budget, tokens (``script/inference.py`` ``max_tokens=4096``).
COSMOS_MAX_TOKENS = 4096
#: Sampling with reasoning (``script/inference.py`` ``SamplingOverrides.get_defaults(reasoning=True)``,
#: "Source: Qwen3-VL README evaluation-reproduction"; seed 1234 there) — identical to the Cosmos 3
#: reasoner's "With reasoning" settings (NVIDIA/cosmos README, ``reasoner_prompt_guide.md``).
COSMOS_REASONING_SAMPLING: dict[str, float | int] = {
    "temperature": 0.6,
    "top_p": 0.95,
    "top_k": 20,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
}
#: Sampling without reasoning (same two sources; seed 3407 in cosmos-reason2).
COSMOS_ANSWER_SAMPLING: dict[str, float | int] = {
    "temperature": 0.7,
    "top_p": 0.8,
    "top_k": 20,
    "repetition_penalty": 1.0,
    "presence_penalty": 1.5,
}
#: "IMPORTANT: Media is listed before text to match training inputs" (``inference_sample.py``);
#: Cosmos 3: "Always place media before the user text prompt".
MEDIA_BEFORE_TEXT = True
#: ``vllm serve … --reasoning-parser qwen3`` (cosmos-reason2 README): ``<think>`` appears only when
#: the prompt asks for it (Cosmos 3: "Reasoning is controlled through the user prompt"; the
#: Instruct template opens no ``<think>``).
VLLM_REASONING_PARSER = "qwen3"
#: Recommended ``--max-model-len`` range of the README, tokens (8192–16384).
COSMOS_MAX_MODEL_LEN = 16384
# Not checked: the Cosmos 3 reasoners' own config.json / chat template / tokenizer (no stored copy
# was found); that their vision tower and processor are Qwen3-VL's rests on the vLLM subclass and on
# NVIDIA/cosmos README's "Qwen3-VL-compatible message conventions".

"""Facts about the model, in one place: Qwen2.5-VL-7B-Instruct and NVIDIA's Cosmos-Reason1-7B.

Cosmos-Reason1-7B is a fine-tune of Qwen2.5-VL-7B-Instruct with the same architecture, processor
and tokenizer. No machine of this project reaches the model hub, so every number the code needs
from the upstream model files is written here once, with the file it comes from; the rest of the
project imports it from here. ``shared/model-facts.md`` restates the same files.

Sources (hub repositories, ``main``):

* ``Qwen/Qwen2.5-VL-7B-Instruct``: ``config.json`` (token ids), ``preprocessor_config.json`` (patch
  and merge sizes, pixel bounds, normalisation), ``tokenizer.json`` / ``tokenizer_config.json``
  (pre-tokenizer regex, NFC, added tokens, eos/pad, model_max_length), ``chat_template.json``
  (the chat template).
* ``nvidia/Cosmos-Reason1-7B``: the model card's inference recipe (fps 4, pixel budget, sampling
  settings, the system prompt asking for ``<think>``/``<answer>``).
* ``qwen-vl-utils`` (``vision_process.py``): ``VIDEO_MIN_PIXELS = 128 * 28 * 28``.

:data:`CHAT_TEMPLATE` is what the generated checkpoints carry; the one renderer of chat templates is
:func:`serve_app.model.family.render_chat` (transformers' sandboxed jinja2 environment).
"""

from __future__ import annotations

# --- Vision geometry (preprocessor_config.json; config.json vision_config) -------------------------

#: Side of a vision patch, pixels (``patch_size``).
PATCH_SIZE = 14
#: Patches merged per side into one LLM token (``merge_size`` / vision_config ``spatial_merge_size``).
SPATIAL_MERGE_SIZE = 2
#: Frames per temporal patch (``temporal_patch_size``): videos are read in frame pairs.
TEMPORAL_PATCH_SIZE = 2
#: Frame sides are multiples of this many pixels: ``PATCH_SIZE · SPATIAL_MERGE_SIZE`` = 28.
PIXEL_FACTOR = PATCH_SIZE * SPATIAL_MERGE_SIZE
#: Smallest image area the processor produces, pixels (``min_pixels`` = 4·28²).
MIN_PIXELS = 3136
#: Largest image area the processor produces, pixels (``max_pixels`` = 16384·28²).
MAX_PIXELS = 12845056
#: Per-channel RGB normalisation (``image_mean`` / ``image_std``, the CLIP values).
IMAGE_MEAN = (0.48145466, 0.4578275, 0.40821073)
IMAGE_STD = (0.26862954, 0.26130258, 0.27577711)

# --- Token ids (config.json, tokenizer_config.json) ------------------------------------------------

#: ``<|endoftext|>``: config.json ``bos_token_id``, the tokenizer's pad token.
ENDOFTEXT_TOKEN_ID = 151643
#: ``<|im_end|>``: config.json ``eos_token_id`` (ends an assistant turn).
IM_END_TOKEN_ID = 151645
VISION_START_TOKEN_ID = 151652
VISION_END_TOKEN_ID = 151653
VISION_TOKEN_ID = 151654
IMAGE_TOKEN_ID = 151655
#: ``<|video_pad|>``: the processor expands one into one token per merged patch of a clip.
VIDEO_TOKEN_ID = 151656
#: Vocabulary rows of the embedding matrix (config.json ``vocab_size``; ids above 151664 are unused).
VOCAB_SIZE = 152064
#: tokenizer_config.json ``model_max_length``, tokens.
MODEL_MAX_LENGTH = 131072

#: (id, content, special) of every added token (tokenizer.json ``added_tokens``): 151643–151656 are
#: special (skipped when decoding with ``skip_special_tokens``), 151657–151664 are not.
ADDED_TOKENS: tuple[tuple[int, str, bool], ...] = (
    (ENDOFTEXT_TOKEN_ID, "<|endoftext|>", True),
    (151644, "<|im_start|>", True),
    (IM_END_TOKEN_ID, "<|im_end|>", True),
    (151646, "<|object_ref_start|>", True),
    (151647, "<|object_ref_end|>", True),
    (151648, "<|box_start|>", True),
    (151649, "<|box_end|>", True),
    (151650, "<|quad_start|>", True),
    (151651, "<|quad_end|>", True),
    (VISION_START_TOKEN_ID, "<|vision_start|>", True),
    (VISION_END_TOKEN_ID, "<|vision_end|>", True),
    (VISION_TOKEN_ID, "<|vision_pad|>", True),
    (IMAGE_TOKEN_ID, "<|image_pad|>", True),
    (VIDEO_TOKEN_ID, "<|video_pad|>", True),
    (151657, "<tool_call>", False),
    (151658, "</tool_call>", False),
    (151659, "<|fim_prefix|>", False),
    (151660, "<|fim_middle|>", False),
    (151661, "<|fim_suffix|>", False),
    (151662, "<|fim_pad|>", False),
    (151663, "<|repo_name|>", False),
    (151664, "<|file_sep|>", False),
)

#: Pre-tokenizer split regex of Qwen1/Qwen2/Qwen2.5 (tokenizer.json ``pre_tokenizer``; applied after
#: NFC normalisation, then byte-level). Unlike cl100k it takes digits one at a time (``\p{N}``).
PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# --- Chat format (chat_template.json) -------------------------------------------------------------

#: What one video becomes in the prompt text (the chat template's video branch).
VIDEO_PLACEHOLDER = "<|vision_start|><|video_pad|><|vision_end|>"

#: The Qwen2-VL chat template, verbatim from Qwen2.5-VL-7B-Instruct's ``chat_template.json``:
#: ``<|im_start|>role\n…<|im_end|>\n`` turns, a default system turn "You are a helpful assistant."
#: when the first message is not a system one, each video as :data:`VIDEO_PLACEHOLDER`.
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

#: The chat template's default system prompt (used by the benchmarks, so that their token counts
#: match the reference figures).
DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."

# --- Cosmos-Reason1 recipe (nvidia/Cosmos-Reason1-7B model card) ----------------------------------

#: Tags of the answer format the recipe's system prompt asks for.
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"

#: The recipe's system prompt, verbatim (the model was tuned with it): it asks for
#: ``<think>\nreasoning\n</think>\n\n<answer>\nanswer\n</answer>``.
COSMOS_SYSTEM_PROMPT = (
    "You are a helpful assistant. Answer the question in the following format: "
    f"{THINK_OPEN}\nyour reasoning\n{THINK_CLOSE}\n\n{ANSWER_OPEN}\nyour answer\n{ANSWER_CLOSE}."
)

#: Frames per second the recipe samples clips at.
COSMOS_FPS = 4.0
#: Pixel budget of a whole clip: 8192·28² = 6,422,528 ("8192 vision tokens").
COSMOS_TOTAL_PIXELS = 8192 * PIXEL_FACTOR**2
#: Per-frame cap before the clip's share is applied: 768·28² = 602,112 pixels.
COSMOS_MAX_FRAME_PIXELS = 768 * PIXEL_FACTOR**2
#: Smallest frame area of a video: 128·28² = 100,352 pixels (qwen-vl-utils ``VIDEO_MIN_PIXELS``,
#: also the transformers Qwen2-VL video processor's default).
VIDEO_MIN_PIXELS = 128 * PIXEL_FACTOR**2
# Sampling settings of the recipe: the model card's vLLM example, ``SamplingParams(temperature=0.6,
# top_p=0.95, repetition_penalty=1.05, max_tokens=4096)``. Their one definition: ``model.sampling``
# (serve_app.config.SamplingDefaults) defaults to them, serve_app.model.sampling_options fills requests
# from that, and the benchmarks import them.
#: Sampling temperature (model card: 0.6).
COSMOS_TEMPERATURE = 0.6
#: Nucleus sampling mass (model card: 0.95).
COSMOS_TOP_P = 0.95
#: Repetition penalty (model card: 1.05).
COSMOS_REPETITION_PENALTY = 1.05
#: Output budget in tokens (model card: 4096, room for the ``<think>`` reasoning and the answer).
COSMOS_MAX_TOKENS = 4096

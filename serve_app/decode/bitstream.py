"""Which compressed pictures other pictures depend on, read from NAL unit headers.

The decoder skips pictures it does not keep; it may only leave out a picture
no later picture predicts from (a *non-reference* picture). For H.264 and
HEVC that is written in the first bytes of each slice NAL unit, so it can be
read from the demuxed packet without decoding:

* H.264 (ITU-T H.264 §7.4.1): ``nal_ref_idc == 0`` on a slice NAL (types 1–5)
  means the picture is never used for reference.
* HEVC (ITU-T H.265 §7.4.2.2): the VCL NAL types TRAIL_N, TSA_N, STSA_N,
  RADL_N, RASL_N and RSV_VCL_N10/12/14 (even types below 16) are sub-layer
  non-reference pictures; with a single temporal sub-layer (``hvcC``
  ``numTemporalLayers`` ≤ 1) nothing references them. This is the rule
  FFmpeg's own ``skip_frame=NONREF`` applies (``ff_hevc_nal_is_nonref``).

Packets come length-prefixed (MP4/MKV ``avcC``/``hvcC``: the extradata gives
the prefix size); Annex-B streams (MPEG-TS, raw) are not parsed (``None``:
unknown), and the decoder then lets FFmpeg decide per packet.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

_H264_SLICE_TYPES = frozenset({1, 2, 3, 4, 5})
_HEVC_NONREF_TYPES = frozenset({0, 2, 4, 6, 8, 10, 12, 14})


@dataclasses.dataclass(frozen=True)
class ReferenceParser:
    """Reads "is this packet a reference picture" for one stream.

    Attributes:
        codec: ``"h264"`` or ``"hevc"``.
        length_size: bytes of each NAL unit's length prefix (1, 2 or 4).
    """

    codec: str
    length_size: int

    @classmethod
    def for_stream(cls, codec_name: str, extradata: bytes | None) -> ReferenceParser | None:
        """A parser for a length-prefixed H.264/HEVC stream, or None when the rule cannot be applied.

        Args:
            codec_name: FFmpeg codec name of the stream (``h264``, ``hevc``, …).
            extradata: the codec extradata (``avcC`` / ``hvcC`` record).
        """
        ed = bytes(extradata or b"")
        if codec_name == "h264" and len(ed) >= 7 and ed[0] == 1:
            return cls("h264", (ed[4] & 0x03) + 1)
        if codec_name == "hevc" and len(ed) >= 23 and ed[0] == 1:
            temporal_layers = (ed[21] >> 3) & 0x07
            if temporal_layers > 1:  # _N pictures may be referenced by higher sub-layers
                return None
            return cls("hevc", (ed[21] & 0x03) + 1)
        return None

    def is_reference(self, data: Buffer) -> bool | None:
        """Whether the packet's picture is used for reference.

        Args:
            data: the packet payload (any buffer: ``bytes``, ``memoryview``, ``av.Packet``).

        Returns:
            True or False from the first slice NAL unit, None if the packet
            holds no slice or is malformed (treat as a reference picture).
        """
        mv = memoryview(data)
        n, ls, i = len(mv), self.length_size, 0
        while i + ls < n:
            size = int.from_bytes(mv[i : i + ls], "big")
            start = i + ls
            if size <= 0 or start + size > n:
                return None
            header = mv[start]
            if self.codec == "h264":
                if (header & 0x1F) in _H264_SLICE_TYPES:
                    return (header >> 5) & 0x03 != 0
            else:
                nal_type = (header >> 1) & 0x3F
                if nal_type < 32:
                    return nal_type not in _HEVC_NONREF_TYPES
            i = start + size
        return None

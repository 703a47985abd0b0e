"""The fake RTSP camera moved into the package (:mod:`serve_app.testing.fake_camera`); re-exported here."""

from serve_app.testing.fake_camera import FakeCamera, frame_times, h264_access_units, rtp_packets  # noqa: F401

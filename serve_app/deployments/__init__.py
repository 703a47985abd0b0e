"""Thin Ray Serve deployments over the pure core: ingress, decoder, model."""

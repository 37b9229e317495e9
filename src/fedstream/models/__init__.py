"""Party models: small multi-layer perceptrons with an explicit backward pass."""

from fedstream.models.mlp import (
    MLP,
    Deferred,
    Dense,
    LayerGrad,
    build_client_model,
    build_server_model,
)

__all__ = ["MLP", "Deferred", "Dense", "LayerGrad", "build_client_model", "build_server_model"]

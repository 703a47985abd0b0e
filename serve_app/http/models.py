"""``GET /v1/models`` and ``GET /v1/models/{model}``: the served model, in OpenAI's shapes."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from serve_app.errors import NotFoundError
from serve_app.http.chat.protocol import ModelCard, ModelList
from serve_app.http.context import error_response, json_response

ROUTE = "/v1/models"


class ModelsServing:
    """The model list and model card of the one served model.

    Args:
        model_name: the served model name.
        created: when the ingress started, Unix seconds (OpenAI's ``created``).
    """

    def __init__(self, model_name: str, created: int):
        self.card = ModelCard(id=model_name, created=created)

    async def models(self, request: Request) -> Response:
        """``GET /v1/models``: a :class:`ModelList` of the served model."""
        return json_response(ModelList(data=[self.card]))

    async def model_card(self, request: Request) -> Response:
        """``GET /v1/models/{model}``: the served model's :class:`ModelCard`, or 404 naming the served model."""
        name = request.path_params["model"]
        if name != self.card.id:
            served = self.card.id
            message = f"model {name[:200]!r} is not served here; this server serves {served!r}"
            return error_response(NotFoundError(message, param="model"))
        return json_response(self.card)

"""What the examples call, served by the stack itself so that they run offline.

``examples/price-check.yaml`` fetches a product and quotes its price. With
COMPOSER_API_EXAMPLES=true (``make run`` sets it) the gateway serves a small
shop under ``/examples/shop/items/{id}``, open like /healthz and no part of the
API (nor of its OpenAPI document); HTTP nodes may call the stack's own API port
(the SSRF guard's one local exception on ``make run``), so the example runs with
no network at all. Off by default: a production gateway serves no toy shop.
"""

from __future__ import annotations

from aiohttp import web

from composer_api_gateway.problems import ApiProblem

#: item id → the product: one priced over 100 (price-check's discount branch), one
#: under 10 (its cheap branch), one between.
SHOP = {
    "7": {"id": 7, "name": "lamp", "price": 120},
    "3": {"id": 3, "name": "pencil", "price": 2},
    "12": {"id": 12, "name": "teapot", "price": 35},
}
ITEMS_PATH = "/examples/shop/items"


def add_routes(app: web.Application) -> None:
    app.router.add_get(ITEMS_PATH + "/{item}", _item)


async def _item(request: web.Request) -> web.Response:
    item = request.match_info["item"]
    if item not in SHOP:
        raise ApiProblem(
            404,
            "not-found",
            f"the example shop has no item {item!r}; it has {', '.join(sorted(SHOP, key=int))}",
        )
    return web.json_response(SHOP[item])

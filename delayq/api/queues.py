"""Queue resources: list, create, metadata, patch, delete, stats, purge."""

from __future__ import annotations

import falcon
import falcon.asgi

from delayq import validation
from delayq.api import request, views
from delayq.broker import Broker
from delayq.errors import ValidationError
from delayq.validation import Limits

JSON_PATCH = "application/openstack-messaging-v2.0-json-patch"
PURGE_TYPES = ("messages", "subscriptions")


class _QueueResource:
    """What every queue resource is given."""

    def __init__(self, *, broker: Broker, limits: Limits) -> None:
        self.broker = broker
        self.limits = limits


class QueueCollection(_QueueResource):
    """``/v2/queues``"""

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        """Zaqar's listing: ``name`` and metadata filters (``validation.queue_filter``),
        ``detailed``, ``with_count`` (every queue of the project, filters aside)."""
        project = request.project(req)
        limits = self.limits
        limit = validation.query_integer(req.get_param("limit"), "limit", 1,
                                         limits.max_queues_per_page, 10)
        marker = req.get_param("marker")
        detailed = validation.query_bool(req.get_param("detailed"), "detailed")
        with_count = validation.query_bool(req.get_param("with_count"), "with_count")
        matching = validation.queue_filter(req.params)
        page = await self.broker.select_queues(project, marker, limit,
                                               matching)
        resp.media = views.name_listing("queues", f"{views.V2}/queues", page, req.params,
                                        limit, detailed)
        if with_count:
            resp.media["count"] = await self.broker.count_queues(project)


class QueueResource(_QueueResource):
    """``/v2/queues/{name}``"""

    async def on_put(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, name: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        metadata = await request.json_body(req, self.limits.max_queue_metadata,
                                           "queue metadata", if_empty={})
        created = await self.broker.create_queue(project, name, metadata)
        resp.status = falcon.HTTP_201 if created else falcon.HTTP_204
        resp.location = req.path

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, name: str) -> None:
        """The metadata: 200 with the defaults for a queue not created yet, as in Zaqar
        (HEAD tells whether it exists)."""
        project = request.project(req)
        validation.queue_name(name)
        resp.media = await self.broker.queue_metadata(project, name)

    async def on_head(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                      name: str) -> None:
        """204 when the queue exists, 404 otherwise (python-zaqarclient's exists())."""
        project = request.project(req)
        validation.queue_name(name)
        await self.broker.check_queue_exists(project, name)
        resp.status = falcon.HTTP_204

    async def on_patch(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                       name: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        request.media_type(req, (JSON_PATCH,), "Queue PATCH")
        operations = await request.json_body(
            req, self.limits.max_queue_metadata, "patch")
        resp.media = await self.broker.patch_queue(project, name, operations)

    async def on_delete(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                        name: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        await self.broker.delete_queue(project, name)
        resp.status = falcon.HTTP_204


class QueueStatsResource(_QueueResource):
    """``/v2/queues/{name}/stats``"""

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, name: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        stats = await self.broker.stats(project, name)
        resp.media = views.stats(name, stats)


async def purge_types(req: falcon.asgi.Request, limits: Limits) -> list[str]:
    """The ``resource_types`` a purge request names (Zaqar's: both without a body,
    ``messages`` when the body names none); 400 on anything else."""
    document = await request.json_body(
        req, limits.max_queue_metadata, "purge request",
        if_empty={"resource_types": list(PURGE_TYPES)})
    if not isinstance(document, dict):
        raise ValidationError("The purge request must be a JSON object.")
    types = document.get("resource_types", ["messages"])
    if not isinstance(types, list) or not all(t in PURGE_TYPES for t in types):
        raise ValidationError("resource_types must be a list of "
                              f"{' and '.join(PURGE_TYPES)}.")
    return types


class QueuePurgeResource(_QueueResource):
    """``/v2/queues/{name}/purge``: delete every message (and claim) of the queue, its
    subscriptions, or both (Zaqar's ``resource_types``; both without a body)."""

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                      name: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        types = await purge_types(req, self.limits)
        if "messages" in types:
            await self.broker.purge_queue(project, name)
        if "subscriptions" in types:
            await self.broker.purge_subscriptions(project, name)
        resp.status = falcon.HTTP_204


# A redrive body is {"destination", "limit"}: anything much larger is not one.
MAX_REDRIVE_BODY = 4096


class QueueRedriveResource(_QueueResource):
    """``/v2/queues/{name}/redrive`` (delayq): send dead-lettered messages back."""

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                      name: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        document = await request.json_body(req, MAX_REDRIVE_BODY, "redrive request",
                                           if_empty={})
        destination, limit = validation.redrive_options(document)
        moved = await self.broker.redrive(project, name,
                                          destination=destination, limit=limit)
        resp.media = {"moved": moved}

"""The projections' HTTP API: routes over the view and their OpenAPI description (pure).

Routing is a plain function from a path (and query) to a status and a JSON body, so it is
tested without a server; `projections.app` mounts it on aiohttp's server.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from projections import job_list
from projections.read_models import (
    health_view,
    job_view,
    jobs_view,
    nodes_view,
    queue_view,
    queues_view,
    usage_view,
)
from projections.recent import Rejections, recent_preemptions
from projections.view import View

PATHS = (
    "/queues",
    "/queues/{id}",
    "/jobs",
    "/jobs/{id}",
    "/nodes",
    "/usage",
    "/health",
    "/preemptions",
    "/rejections",
    "/openapi.json",
)

_RESOURCES = {
    "type": "object",
    "properties": {
        "gpu": {"type": "number", "description": "devices (fractions allowed)"},
        "cpu": {"type": "integer", "description": "millicores"},
        "memory": {"type": "integer", "description": "MB"},
    },
}
_AS_OF = {
    "type": "object",
    "description": "the journal position the view reflects",
    "properties": {"seq": {"type": "integer"}, "ts": {"type": "integer"}},
}
_QUEUE_RESOURCE = {
    "type": "object",
    "properties": {
        "deserved": {"oneOf": [{"type": "number"}, {"const": "unlimited"}]},
        "fair_share": {"type": "number"},
        "allocated": {"type": "number", "description": "the whole subtree's allocation"},
        "own_allocated": {"type": "number", "description": "the queue's own jobs"},
        "limit": {"type": ["number", "null"], "description": "null: no cap"},
    },
}
_PENDING = {
    "type": "object",
    "properties": {
        "job": {"type": "string"},
        "position": {"type": "integer", "description": "1 is tried first"},
        "priority": {"type": "integer"},
        "effective_priority": {"type": "integer"},
        "kind": {
            "type": "string",
            "enum": [
                "new",
                "capacity",
                "quota",
                "limit",
                "preempting",
                "failed",
                "blocked_behind_head",
                "balance_wait",
            ],
        },
        "reason": {"type": "string"},
        "blocked_since": {"type": ["integer", "null"]},
        "waiting_ms": {"type": "integer"},
        "request": {"$ref": "#/components/schemas/Resources"},
    },
}
_QUEUE = {
    "type": "object",
    "properties": {
        "queue": {"type": "string"},
        "parent": {"type": ["string", "null"]},
        "children": {"type": "array", "items": {"type": "string"}},
        "priority": {"type": "integer"},
        "policy": {"type": "string"},
        "resources": {
            "type": "object",
            "additionalProperties": {"$ref": "#/components/schemas/QueueResource"},
        },
        "pending": {"type": "array", "items": {"$ref": "#/components/schemas/PendingJob"}},
        "running": {"type": "array", "items": {"type": "object"}},
        "preemptions": {"type": "integer", "description": "Preempt commands against its jobs"},
    },
}
_TIMELINE_ENTRY = {
    "type": "object",
    "description": (
        "event: submitted, dispatched (node, attempt, reason), started, preempted (reason, by, "
        "context: the queues' numbers in that cycle), preempting (victim), stopped, finished "
        "(outcome), cancel_requested"
    ),
    "properties": {
        "ts": {"type": "integer"},
        "seq": {"type": "integer"},
        "event": {"type": "string"},
        "node": {"type": "string"},
        "attempt": {"type": "integer"},
        "reason": {"type": "string"},
        "by": {"type": ["string", "null"]},
    },
    "required": ["ts", "seq", "event"],
}
_USAGE = {
    "type": "object",
    "properties": {
        "allocated": {"$ref": "#/components/schemas/Resources"},
        "capacity": {"$ref": "#/components/schemas/Resources"},
        "utilisation": {"type": ["number", "null"], "description": "gpu allocated / capacity now"},
        "mean_utilisation": {
            "type": ["number", "null"],
            "description": "time-weighted since since_ts",
        },
        "since_ts": {"type": ["integer", "null"]},
        "points": {"type": "array", "items": {"type": "object"}, "description": "with ?points=1"},
    },
}


def _get(
    summary: str, schema: dict[str, Any], params: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": summary,
        "responses": {
            "200": {"description": "OK", "content": {"application/json": {"schema": schema}}},
        },
    }
    if params:
        operation["parameters"] = params
        operation["responses"]["404"] = {"description": "not found"}
    return {"get": operation}


def _path_id(description: str) -> list[dict[str, Any]]:
    return [
        {
            "name": "id",
            "in": "path",
            "required": True,
            "schema": {"type": "string"},
            "description": description,
        }
    ]


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "QuotaFlow projections",
        "version": "1",
        "description": (
            "Read-only views folded from quotaflow.journal with the scheduler's own core. Every "
            "answer carries as_of: the journal position it reflects (at most one group behind)."
        ),
    },
    "paths": {
        "/queues": _get(
            "every queue, parents before children",
            {
                "type": "object",
                "properties": {
                    "as_of": _AS_OF,
                    "queues": {"type": "array", "items": _ref("Queue")},
                },
            },
        ),
        "/queues/{id}": _get("one queue", _ref("Queue"), _path_id("queue id")),
        "/jobs": _get(
            "live jobs in submission order",
            {
                "type": "object",
                "properties": {"jobs": {"type": "array", "items": {"type": "object"}}},
            },
            [{"name": "queue", "in": "query", "required": False, "schema": {"type": "string"}}],
        ),
        "/jobs/{id}": _get(
            "one job's timeline and the explanation of its status",
            {
                "type": "object",
                "properties": {
                    "job": {"type": "string"},
                    "queue": {"type": ["string", "null"]},
                    "status": {"type": ["string", "null"]},
                    "timeline": {"type": "array", "items": _ref("TimelineEntry")},
                    "explanation": {"type": "object"},
                },
            },
            _path_id("job id"),
        ),
        "/nodes": _get("nodes: capacity, allocated, free, jobs", {"type": "object"}),
        "/usage": _get(
            "allocated vs capacity per cluster, queue and node, now and time-weighted",
            {
                "type": "object",
                "properties": {
                    "cluster": _ref("Usage"),
                    "queues": {"type": "object", "additionalProperties": _ref("Usage")},
                    "nodes": {"type": "object", "additionalProperties": _ref("Usage")},
                },
            },
            [{"name": "points", "in": "query", "required": False, "schema": {"type": "boolean"}}],
        ),
        "/health": _get("how far the view has read, and the command check", {"type": "object"}),
        "/preemptions": _get(
            "the newest Preempt commands (job, node, reason, by), newest first",
            {"type": "object"},
        ),
        "/rejections": _get(
            "the newest inputs refused on quotaflow.rejected (ts, reason, input), newest first",
            {"type": "object"},
        ),
        "/openapi.json": _get("this description", {"type": "object"}),
    },
    "components": {
        "schemas": {
            "Resources": _RESOURCES,
            "QueueResource": _QUEUE_RESOURCE,
            "PendingJob": _PENDING,
            "Queue": _QUEUE,
            "TimelineEntry": _TIMELINE_ENTRY,
            "Usage": _USAGE,
        }
    },
}


def _not_found(what: str) -> tuple[int, dict[str, Any]]:
    return 404, {"error": f"{what} not found"}


def route(
    view: View,
    path: str,
    query: dict[str, str] | None = None,
    rejections: Rejections | None = None,
) -> tuple[int, Any]:
    """The status and JSON body for a GET of `path` (`rejections`: what the process read)."""
    query = query or {}
    parts = [unquote(p) for p in path.strip("/").split("/") if p]
    if parts == ["openapi.json"]:
        return 200, OPENAPI
    if parts == ["queues"]:
        return 200, queues_view(view)
    if len(parts) == 2 and parts[0] == "queues":
        body = queue_view(view, parts[1])
        return (200, body) if body is not None else _not_found(f"queue {parts[1]!r}")
    if parts == ["jobs"]:
        return 200, {
            "as_of": {"seq": view.state.seq, "ts": view.state.ts},
            "jobs": jobs_view(view, query.get("queue")),
        }
    if len(parts) >= 2 and parts[0] == "jobs":
        job_id = "/".join(parts[1:])  # job ids may contain '/'
        body = job_view(view, job_id)
        return (200, body) if body is not None else _not_found(f"job {job_id!r}")
    if parts == ["nodes"]:
        return 200, nodes_view(view)
    if parts == ["usage"]:
        return 200, usage_view(view, points=query.get("points", "") in ("1", "true", "yes"))
    if parts == ["health"]:
        return 200, health_view(view)
    if parts[:1] == ["accounting"]:
        return job_list.route(view, parts, query)
    if parts == ["preemptions"]:
        return 200, {
            "as_of": {"seq": view.state.seq, "ts": view.state.ts},
            "preemptions": recent_preemptions(view.timelines),
        }
    if parts == ["rejections"]:
        return 200, {
            "rejections": [] if rejections is None else rejections.newest(),
            "read": 0 if rejections is None else rejections.read,
        }
    return 404, {"error": f"no such path {path!r}", "paths": list(PATHS)}

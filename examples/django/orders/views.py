from __future__ import annotations

import os

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from orders.jobs import SendReceipt, client
from worker_sdk.outbox.django import outbox


@csrf_exempt
@require_POST
def place_order(request: HttpRequest, order_id: str) -> JsonResponse:
    job_id = client().enqueue(SendReceipt(order_id))
    return JsonResponse({"job_id": job_id, "pid": os.getpid()}, status=202)


@csrf_exempt
@require_POST
def place_order_atomically(request: HttpRequest, order_id: str) -> JsonResponse:
    """The job is written into the outbox table in the request's transaction, with the
    order's own writes: it is enqueued (by ``runwick outbox relay``) only if they commit."""
    with transaction.atomic():
        # ... Order.objects.create(...), and the rest of the order's writes ...
        key = outbox.enqueue(SendReceipt(order_id))
    return JsonResponse({"idempotency_key": key, "pid": os.getpid()}, status=202)

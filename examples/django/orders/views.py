from __future__ import annotations

import os

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from orders.jobs import SendReceipt, client


@csrf_exempt
@require_POST
def place_order(request: HttpRequest, order_id: str) -> JsonResponse:
    job_id = client().enqueue(SendReceipt(order_id))
    return JsonResponse({"job_id": job_id, "pid": os.getpid()}, status=202)

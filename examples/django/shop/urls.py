from django.urls import path
from orders.views import place_order, place_order_atomically

urlpatterns = [
    path("orders/<str:order_id>", place_order),
    path("orders/<str:order_id>/atomic", place_order_atomically),
]

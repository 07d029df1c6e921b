from django.urls import path
from orders.views import place_order

urlpatterns = [path("orders/<str:order_id>", place_order)]

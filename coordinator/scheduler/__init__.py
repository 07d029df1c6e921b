"""Background work, one loop per module, each an object with ``async run(stop)`` and
its interval from ``CoordinatorConfig``: lease expiry (``leases``), due jobs (``due``),
the database clock (``clock``), queue statistics and readiness (``stats``), recurring
schedules' ticks (``cron``). The facade starts them and hands on what they change."""

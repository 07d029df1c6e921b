"""Every page and action of the dashboard, with the scope each needs (the API's, R-21):
``views.ROUTES`` and the pages of the modules beside it. The first route that matches a
path wins, so the fixed paths come before ``/jobs/{job_id}``."""

from __future__ import annotations

from coordinator.dashboard import schedule_views, search_views, views
from coordinator.dashboard.requests import View
from coordinator.domain.access import Scope

GET, POST = views.GET, views.POST
ADDED: list[tuple[str, View, Scope, tuple[str, ...]]] = [
    ("/jobs", search_views.jobs, Scope.READ, GET),
    # Purge removes jobs for good: ``admin``, as ``PurgeJobs`` (``runwick purge``) needs.
    ("/jobs/bulk/purge", search_views.purge_confirm, Scope.ADMIN, GET),
    ("/jobs/bulk/purge", search_views.purge_run, Scope.ADMIN, POST),
    ("/jobs/bulk/{verb}", search_views.bulk_confirm, Scope.MANAGE, GET),
    ("/jobs/bulk/{verb}", search_views.bulk_run, Scope.MANAGE, POST),
    ("/schedules/new", schedule_views.new_schedule, Scope.MANAGE, GET),
    ("/schedules/new", schedule_views.create_schedule, Scope.MANAGE, POST),
    ("/schedules/{name}/run", schedule_views.run_schedule, Scope.MANAGE, POST),
    ("/schedules/{name}/delete", schedule_views.confirm_delete, Scope.MANAGE, GET),
    ("/schedules/{name}/delete", schedule_views.delete_schedule, Scope.MANAGE, POST),
]
ROUTES = [*ADDED, *views.ROUTES]

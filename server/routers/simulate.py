"""REST: simulating a run under every dispatch policy (the What if section), as the one
simulation policy (workload/whatif.py) chooses for a run, through the service layer."""
from __future__ import annotations

from functools import partial

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel

from polytrace import service
from polytrace.server.deps import DbDep, WriterDep
from polytrace.server.errors import ApiError, error_responses
from polytrace.server.responses import Json
from polytrace.store.runs import exists
from polytrace.workload import WorkloadError

class Simulated(BaseModel):
    ok: bool = True
    run_id: str
    rows: int  # whatif rows stored: per engine and per step, for every policy
    policies: list[str]
    calibration: str



def router() -> APIRouter:
    routes = APIRouter(prefix="/api", tags=["api"], default_response_class=Json)
    routes.add_api_route("/runs/{run_id}/whatif", simulate_run, methods=["POST"],
                         operation_id="simulate_run", dependencies=[WriterDep],
                         response_model=Simulated, responses=error_responses(401, 404, 409),
                         summary="Simulate the run under every dispatch policy (the What if section)")
    return routes


def simulate(run_id: str, cur) -> dict:
    """Simulate with the run's own log calibration when it timed its rollout, else the built-in grid
    (workload/whatif.py `simulation`, calibration "auto"), store it and sum the run up again."""
    if not exists(cur, run_id):
        raise ApiError(404, f"unknown run {run_id!r}")
    try:
        done = service.simulate_run(cur, run_id, calibration="auto")
    except WorkloadError as e:
        raise ApiError(409, str(e)) from None
    return {"ok": True, "run_id": run_id, "rows": done.stored, "policies": done.policies,
            "calibration": done.calibration}


async def simulate_run(run_id: str, db: DbDep) -> dict:
    """The run's own log calibration when it has a generation time, else the built-in H200 grid;
    one writer at a time, like uploads."""
    return await run_in_threadpool(db.write, partial(simulate, run_id))

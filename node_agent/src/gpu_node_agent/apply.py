"""Applying a desired MIG layout to one GPU: only the difference, never a busy instance.

Unlike mig-parted (which clears a GPU and re-creates every instance), the plan keeps the GPU
instances that are in both the current and the desired layout (same profile, same start), so
what runs on them keeps running. The rest, in PROTOCOL.md's order:

1. refuse, changing nothing on the GPU, when a GPU instance to destroy (or, for a MIG mode
   change, the GPU) has a process on it: ``failed`` with "busy: pid ...";
2. destroy the compute instances, then the GPU instances, that are not in the layout;
3. change the MIG mode when the layout asks for the other one: NVML makes it pending until the
   GPU is reset, so the result is ``reboot-required`` (unless the change took effect at once);
4. create the new GPU instances at their placements, then one full compute instance in each;
5. read the GPU back and compare it with the layout.

``plan_gpu`` computes the steps without changing anything (``--dry-run`` prints them with
``format_plan``); ``apply_gpu`` runs them. Both are idempotent: on a GPU that already has the
layout the plan is empty and the result ``success``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_node_agent.backend import Backend, BackendError, Gpu, GpuInstance, Process
from gpu_spec.mig.catalogue import Catalogue, load_catalogue
from gpu_spec.mig.layout import InstanceRequest, validate_layout

STATE_APPLYING = "applying"
STATE_SUCCESS = "success"
STATE_FAILED = "failed"
STATE_REBOOT_REQUIRED = "reboot-required"

OUTCOME_CHANGE = "change"  # steps to run
OUTCOME_NOTHING = "nothing"  # already as desired
OUTCOME_FAILED = STATE_FAILED  # refused (busy, invalid layout, unknown GPU); nothing changed
OUTCOME_REBOOT_REQUIRED = STATE_REBOOT_REQUIRED  # waiting for a reset; nothing to do meanwhile

ACTION_DESTROY_CI = "destroy-ci"
ACTION_DESTROY_GI = "destroy-gi"
ACTION_SET_MIG_MODE = "set-mig-mode"
ACTION_CREATE_GI = "create-gi"
ACTION_CREATE_CI = "create-ci"

PodLookup = Callable[[int], "str | None"]


class DesiredLayoutError(ValueError):
    """A desired layout from the portal is not shaped as PROTOCOL.md says."""


@dataclass(frozen=True)
class DesiredInstance:
    profile: str
    start: int | None = None


@dataclass(frozen=True)
class DesiredGpu:
    """One GPU's entry of ``GET /api/v1/agent/desired/``."""

    uuid: str
    generation: int
    mig_enabled: bool
    instances: tuple[DesiredInstance, ...] = ()

    @classmethod
    def from_json(cls, data: Any) -> DesiredGpu:
        if not isinstance(data, Mapping):
            raise DesiredLayoutError("a desired GPU must be an object")
        uuid, generation = data.get("uuid"), data.get("generation")
        if not isinstance(uuid, str) or not uuid:
            raise DesiredLayoutError("uuid: expected a string")
        if isinstance(generation, bool) or not isinstance(generation, int):
            raise DesiredLayoutError(f"{uuid}: generation must be an integer")
        mig_enabled = data.get("mig_enabled", True)
        if not isinstance(mig_enabled, bool):
            raise DesiredLayoutError(f"{uuid}: mig_enabled must be true or false")
        raw = data.get("instances") or []
        if not isinstance(raw, list):
            raise DesiredLayoutError(f"{uuid}: instances must be a list")
        instances = []
        for position, item in enumerate(raw):
            if not isinstance(item, Mapping) or not isinstance(item.get("profile"), str):
                raise DesiredLayoutError(f"{uuid}: instances[{position}] needs a profile")
            start = item.get("start")
            if start is not None and (isinstance(start, bool) or not isinstance(start, int)):
                raise DesiredLayoutError(f"{uuid}: instances[{position}].start must be an integer")
            instances.append(DesiredInstance(item["profile"], start))
        return cls(uuid, generation, mig_enabled, tuple(instances))

    def to_json(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "generation": self.generation,
            "mig_enabled": self.mig_enabled,
            "instances": [{"profile": i.profile, "start": i.start} for i in self.instances],
        }


@dataclass(frozen=True)
class Step:
    action: str
    gpu_index: int
    gi_id: int | None = None
    ci_id: int | None = None
    profile: str | None = None
    start: int | None = None
    enabled: bool | None = None

    def describe(self) -> str:
        where = f"{self.profile} at slice {self.start}"
        if self.action == ACTION_DESTROY_CI:
            return f"destroy compute instance {self.ci_id} of GPU instance {self.gi_id} ({where})"
        if self.action == ACTION_DESTROY_GI:
            return f"destroy GPU instance {self.gi_id} ({where})"
        if self.action == ACTION_SET_MIG_MODE:
            mode = "on" if self.enabled else "off"
            return f"set MIG mode {mode} (takes effect after a GPU reset or a reboot)"
        if self.action == ACTION_CREATE_GI:
            return f"create GPU instance {where}"
        if self.gi_id is not None:
            return f"create a full compute instance in GPU instance {self.gi_id} ({where})"
        return f"create a full compute instance in the new {where}"


@dataclass
class Plan:
    uuid: str
    generation: int
    gpu: Gpu | None
    outcome: str
    message: str = ""
    steps: list[Step] = field(default_factory=list)
    kept: list[GpuInstance] = field(default_factory=list)
    desired: DesiredGpu | None = None


@dataclass(frozen=True)
class ApplyResult:
    uuid: str
    generation: int
    state: str
    message: str
    attempted_changes: bool = False  # some step ran (a failure after that is not retried)
    # After instances changed: restart-needed, restarted or restart-failed (device_plugin.py).
    device_plugin: str = ""
    device_plugin_message: str = ""

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "uuid": self.uuid,
            "generation": self.generation,
            "state": self.state,
            "message": self.message,
        }
        if self.device_plugin:
            body["device_plugin"] = self.device_plugin
            body["device_plugin_message"] = self.device_plugin_message
        return body


def _gpu_label(gpu: Gpu) -> str:
    return f"GPU {gpu.index} ({gpu.name})"


def describe_busy(
    processes: Sequence[Process],
    instances: Mapping[int, GpuInstance],
    pod_uid_for_pid: PodLookup | None = None,
) -> str:
    """``busy: pid 4242 (pod 6b1c...) on GPU instance 1 (3g.40gb at slice 0), pid ...``."""
    parts = []
    for process in sorted(processes, key=lambda p: p.pid):
        text = f"pid {process.pid}"
        pod = pod_uid_for_pid(process.pid) if pod_uid_for_pid is not None else None
        if pod:
            text += f" (pod {pod})"
        instance = instances.get(process.gi_id) if process.gi_id is not None else None
        if instance is not None:
            text += (
                f" on GPU instance {instance.gi_id} ({instance.profile} at slice {instance.start})"
            )
        parts.append(text)
    return "busy: " + ", ".join(parts)


def _find_gpu(backend: Backend, uuid: str) -> Gpu | None:
    return next((gpu for gpu in backend.list_gpus() if gpu.uuid == uuid), None)


def _resolve_starts(
    backend: Backend, gpu: Gpu, desired: DesiredGpu, catalogue: Catalogue
) -> tuple[list[tuple[str, int]] | None, str]:
    """The desired (profile, start) pairs checked against the catalogue's rules and what the
    driver offers; ``(None, why)`` when the layout cannot be applied to this GPU."""
    offered = {profile.name: profile for profile in backend.list_profiles(gpu.index)}
    unknown = [i.profile for i in desired.instances if i.profile not in offered]
    if unknown:
        names = ", ".join(offered) or "none"
        return None, (
            f"{_gpu_label(gpu)} does not offer MIG profile {', '.join(sorted(set(unknown)))} "
            f"(its driver offers {names})"
        )
    wanted: list[tuple[str, int | None]] = [(i.profile, i.start) for i in desired.instances]
    model = catalogue.find_model(gpu.name)
    if model is not None:
        checked = validate_layout(model, [InstanceRequest(p, s) for p, s in wanted])
        if not checked.ok:
            return None, f"the layout is not valid on {gpu.name}: " + "; ".join(checked.errors)
        wanted = [(p.profile, p.start) for p in checked.placements]
    elif any(start is None for _, start in wanted):
        return None, f"{gpu.name} is not in the MIG catalogue: every instance needs a start"
    resolved: list[tuple[str, int]] = []
    taken: list[tuple[int, int, str]] = []
    counts: dict[str, int] = {}
    for profile_name, start in wanted:
        assert start is not None  # filled in above
        placements = backend.possible_placements(gpu.index, profile_name)
        match = next((p for p in placements if p.start == start), None)
        if match is None:
            starts = ", ".join(str(p.start) for p in placements) or "none"
            return None, (
                f"{profile_name} cannot start at slice {start} on {_gpu_label(gpu)} "
                f"(the driver's placements start at {starts})"
            )
        for other_start, other_end, other in taken:
            if start < other_end and other_start < match.end:
                return None, f"{profile_name} at slice {start} overlaps {other} at {other_start}"
        counts[profile_name] = counts.get(profile_name, 0) + 1
        if counts[profile_name] > offered[profile_name].max_count:
            return (
                None,
                f"{_gpu_label(gpu)} allows at most {offered[profile_name].max_count} {profile_name}",
            )
        taken.append((start, match.end, profile_name))
        resolved.append((profile_name, start))
    return resolved, ""


def plan_gpu(
    backend: Backend,
    desired: DesiredGpu,
    *,
    catalogue: Catalogue | None = None,
    pod_uid_for_pid: PodLookup | None = None,
) -> Plan:
    """What applying ``desired`` would do; changes nothing."""
    catalogue = catalogue if catalogue is not None else load_catalogue()
    gpu = _find_gpu(backend, desired.uuid)
    if gpu is None:
        return _refused(desired, gpu, f"no GPU with UUID {desired.uuid} on this node")
    unfit = _unfit(desired, gpu)
    if unfit is not None:
        return unfit
    current = backend.list_gpu_instances(gpu.index) if gpu.mig_mode_current else []
    by_id = {instance.gi_id: instance for instance in current}
    if gpu.mig_mode_current != desired.mig_enabled:
        return _plan_mode_change(backend, desired, gpu, current, by_id, pod_uid_for_pid)

    steps: list[Step] = []
    if gpu.mig_mode_pending != desired.mig_enabled:
        # Someone asked NVML for the other mode; ask for this one again so no reset flips it.
        steps.append(Step(ACTION_SET_MIG_MODE, gpu.index, enabled=desired.mig_enabled))
    if not desired.mig_enabled:
        outcome = OUTCOME_CHANGE if steps else OUTCOME_NOTHING
        return Plan(
            desired.uuid, desired.generation, gpu, outcome, "MIG off", steps=steps, desired=desired
        )

    wanted, why = _resolve_starts(backend, gpu, desired, catalogue)
    if wanted is None:
        return _refused(desired, gpu, why)
    kept, destroy, remaining = _match_instances(current, wanted)
    busy = _busy_on(backend, gpu, destroy)
    if busy:
        return _refused(desired, gpu, describe_busy(busy, by_id, pod_uid_for_pid))
    steps.extend(_layout_steps(backend, gpu, destroy, remaining, kept))
    outcome = OUTCOME_CHANGE if steps else OUTCOME_NOTHING
    return Plan(
        desired.uuid, desired.generation, gpu, outcome, steps=steps, kept=kept, desired=desired
    )


def _refused(
    desired: DesiredGpu, gpu: Gpu | None, message: str, outcome: str = OUTCOME_FAILED
) -> Plan:
    return Plan(desired.uuid, desired.generation, gpu, outcome, message, desired=desired)


def _unfit(desired: DesiredGpu, gpu: Gpu) -> Plan | None:
    """The plan when the layout does not fit the GPU at all (a refusal, or nothing to do on a
    GPU without MIG); None: it may."""
    if not desired.mig_enabled and desired.instances:
        return _refused(desired, gpu, "a layout with MIG disabled cannot have MIG instances")
    if desired.mig_enabled and not gpu.mig_capable:
        return _refused(desired, gpu, f"{_gpu_label(gpu)} does not support MIG")
    if not gpu.mig_capable:
        return Plan(
            desired.uuid, desired.generation, gpu, OUTCOME_NOTHING, "MIG off", desired=desired
        )
    return None


def _plan_mode_change(
    backend: Backend,
    desired: DesiredGpu,
    gpu: Gpu,
    current: list[GpuInstance],
    by_id: dict[int, GpuInstance],
    pod_uid_for_pid: PodLookup | None,
) -> Plan:
    """A mode change resets the GPU: only on an idle one, and with every instance gone."""
    processes = backend.list_processes(gpu.index)
    if processes:
        return _refused(
            desired,
            gpu,
            describe_busy(processes, by_id, pod_uid_for_pid)
            + f" (MIG mode can only change on an idle GPU: {_gpu_label(gpu)})",
        )
    steps: list[Step] = []
    for instance in current:
        steps.extend(_destroy_steps(gpu, instance))
    if gpu.mig_mode_pending == desired.mig_enabled:
        if steps:
            return Plan(
                desired.uuid, desired.generation, gpu, OUTCOME_CHANGE, steps=steps, desired=desired
            )
        return _refused(
            desired, gpu, _pending_message(gpu, desired.mig_enabled), OUTCOME_REBOOT_REQUIRED
        )
    steps.append(Step(ACTION_SET_MIG_MODE, gpu.index, enabled=desired.mig_enabled))
    return Plan(
        desired.uuid,
        desired.generation,
        gpu,
        OUTCOME_CHANGE,
        "instances are created once the new MIG mode is in effect" if desired.mig_enabled else "",
        steps=steps,
        desired=desired,
    )


def _match_instances(
    current: list[GpuInstance], wanted: list[tuple[str, int]]
) -> tuple[list[GpuInstance], list[GpuInstance], list[tuple[str, int]]]:
    """Keep each current instance that matches a wanted (profile, start); the rest go.
    Returns those kept, those destroyed and the (profile, start) pairs still to create."""
    remaining = list(wanted)
    kept: list[GpuInstance] = []
    destroy: list[GpuInstance] = []
    for instance in current:
        key = (instance.profile, instance.start)
        if key in remaining:
            remaining.remove(key)
            kept.append(instance)
        else:
            destroy.append(instance)
    return kept, destroy, remaining


def _busy_on(backend: Backend, gpu: Gpu, destroy: list[GpuInstance]) -> list[Process]:
    """The processes on the instances to destroy: those they report, and any other NVML
    lists on them."""
    doomed = {instance.gi_id for instance in destroy}
    busy = [p for i in destroy for p in i.processes]
    seen = {p.pid for p in busy}
    if doomed:
        for process in backend.list_processes(gpu.index):
            if process.gi_id in doomed and process.pid not in seen:
                busy.append(process)
                seen.add(process.pid)
    return busy


def _layout_steps(
    backend: Backend,
    gpu: Gpu,
    destroy: list[GpuInstance],
    remaining: list[tuple[str, int]],
    kept: list[GpuInstance],
) -> list[Step]:
    """Destroy what goes, create what is missing (GPU instances, then their compute
    instances), and a compute instance for a kept GPU instance that has none."""
    steps: list[Step] = []
    for instance in sorted(destroy, key=lambda i: (i.start, i.gi_id)):
        steps.extend(_destroy_steps(gpu, instance))
    # Explicit placements make the order irrelevant to NVML; largest first reads naturally.
    sizes = {p.name: p for p in backend.list_profiles(gpu.index)}
    creations = sorted(
        remaining, key=lambda pair: (-sizes[pair[0]].compute_slices, pair[1], pair[0])
    )
    for profile_name, start in creations:
        steps.append(Step(ACTION_CREATE_GI, gpu.index, profile=profile_name, start=start))
    for profile_name, start in creations:
        steps.append(Step(ACTION_CREATE_CI, gpu.index, profile=profile_name, start=start))
    for instance in kept:
        if not instance.ci_ids:
            steps.append(
                Step(
                    ACTION_CREATE_CI,
                    gpu.index,
                    gi_id=instance.gi_id,
                    profile=instance.profile,
                    start=instance.start,
                )
            )
    return steps


def _destroy_steps(gpu: Gpu, instance: GpuInstance) -> list[Step]:
    profile, start, gi_id = instance.profile, instance.start, instance.gi_id
    steps = [
        Step(ACTION_DESTROY_CI, gpu.index, gi_id=gi_id, ci_id=ci_id, profile=profile, start=start)
        for ci_id in instance.ci_ids
    ]
    steps.append(Step(ACTION_DESTROY_GI, gpu.index, gi_id=gi_id, profile=profile, start=start))
    return steps


def _pending_message(gpu: Gpu, enabled: bool) -> str:
    mode = "on" if enabled else "off"
    return (
        f"MIG mode {mode} is pending on {_gpu_label(gpu)}: reset the GPU or reboot the node; "
        "the layout is applied once the mode is in effect"
    )


def format_plan(plan: Plan) -> str:
    """The plan as ``--dry-run`` prints it."""
    gpu = plan.gpu
    head = (
        f"{_gpu_label(gpu)} {plan.uuid}, generation {plan.generation}:"
        if gpu is not None
        else f"{plan.uuid}, generation {plan.generation}:"
    )
    lines = [head]
    for instance in plan.kept:
        lines.append(
            f"  keep GPU instance {instance.gi_id} ({instance.profile} at slice {instance.start})"
        )
    for number, step in enumerate(plan.steps, start=1):
        lines.append(f"  {number}. {step.describe()}")
    if plan.outcome == OUTCOME_NOTHING:
        lines.append("  nothing to change")
    elif plan.outcome == OUTCOME_FAILED:
        lines.append(f"  refused: {plan.message}")
    elif plan.outcome == OUTCOME_REBOOT_REQUIRED:
        lines.append(f"  reboot required: {plan.message}")
    elif plan.message:
        lines.append(f"  then: {plan.message}")
    return "\n".join(lines)


def apply_gpu(
    backend: Backend,
    desired: DesiredGpu,
    *,
    catalogue: Catalogue | None = None,
    pod_uid_for_pid: PodLookup | None = None,
    on_applying: Callable[[], None] | None = None,
) -> ApplyResult:
    """Apply ``desired`` to its GPU (see the module docstring) and say how it went."""
    catalogue = catalogue if catalogue is not None else load_catalogue()
    return _apply(backend, desired, catalogue, pod_uid_for_pid, on_applying, attempt=0)


def _apply(
    backend: Backend,
    desired: DesiredGpu,
    catalogue: Catalogue,
    pod_uid_for_pid: PodLookup | None,
    on_applying: Callable[[], None] | None,
    *,
    attempt: int,
) -> ApplyResult:
    def result(state: str, message: str, attempted: bool) -> ApplyResult:
        return ApplyResult(desired.uuid, desired.generation, state, message, attempted)

    plan = plan_gpu(backend, desired, catalogue=catalogue, pod_uid_for_pid=pod_uid_for_pid)
    if plan.outcome == OUTCOME_FAILED:
        return result(STATE_FAILED, plan.message, attempt > 0)
    if plan.outcome == OUTCOME_REBOOT_REQUIRED:
        return result(STATE_REBOOT_REQUIRED, plan.message, attempt > 0)
    assert plan.gpu is not None
    gpu = plan.gpu
    if plan.outcome == OUTCOME_NOTHING:
        return _verify(backend, plan, catalogue, attempted=attempt > 0)

    if on_applying is not None and attempt == 0:
        on_applying()
    created: dict[tuple[str, int], int] = {}
    destroyed_gis = 0
    done: list[str] = []
    for step in plan.steps:
        try:
            if step.action == ACTION_DESTROY_CI:
                assert step.gi_id is not None and step.ci_id is not None
                backend.destroy_compute_instance(gpu.index, step.gi_id, step.ci_id)
            elif step.action == ACTION_DESTROY_GI:
                assert step.gi_id is not None
                backend.destroy_gpu_instance(gpu.index, step.gi_id)
                destroyed_gis += 1
            elif step.action == ACTION_SET_MIG_MODE:
                assert step.enabled is not None
                if not backend.set_mig_mode(gpu.index, step.enabled):
                    return result(STATE_REBOOT_REQUIRED, _pending_message(gpu, step.enabled), True)
                if step.enabled and attempt == 0:
                    # The mode took effect at once: plan the instances on the MIG-enabled GPU.
                    return _apply(
                        backend, desired, catalogue, pod_uid_for_pid, on_applying, attempt=1
                    )
            elif step.action == ACTION_CREATE_GI:
                assert step.profile is not None and step.start is not None
                instance = backend.create_gpu_instance(gpu.index, step.profile, step.start)
                created[(step.profile, step.start)] = instance.gi_id
            elif step.action == ACTION_CREATE_CI:
                gi_id = step.gi_id
                if gi_id is None:
                    assert step.profile is not None and step.start is not None
                    gi_id = created[(step.profile, step.start)]
                backend.create_compute_instance(gpu.index, gi_id)
        except BackendError as error:
            before = f" (done before it: {'; '.join(done)})" if done else ""
            return result(STATE_FAILED, f"{step.describe()}: {error.message}{before}", True)
        done.append(step.describe())
    return _verify(
        backend, plan, catalogue, attempted=True, created=len(created), destroyed=destroyed_gis
    )


def _verify(
    backend: Backend,
    plan: Plan,
    catalogue: Catalogue,
    *,
    attempted: bool,
    created: int = 0,
    destroyed: int = 0,
) -> ApplyResult:
    desired = plan.desired
    gpu = plan.gpu
    assert desired is not None and gpu is not None

    def result(state: str, message: str) -> ApplyResult:
        return ApplyResult(desired.uuid, desired.generation, state, message, attempted)

    now = _find_gpu(backend, desired.uuid)
    if now is None:
        return result(STATE_FAILED, f"GPU {desired.uuid} disappeared while applying the layout")
    if now.mig_capable and now.mig_mode_current != desired.mig_enabled:
        return result(STATE_REBOOT_REQUIRED, _pending_message(now, desired.mig_enabled))
    if not desired.mig_enabled:
        return result(STATE_SUCCESS, "MIG mode is off")
    instances = backend.list_gpu_instances(now.index)
    have = sorted((i.profile, i.start) for i in instances)
    wanted, why = _resolve_starts(backend, now, desired, catalogue)
    if wanted is None:
        return result(STATE_FAILED, f"verification failed: {why}")
    if have != sorted(wanted):
        return result(
            STATE_FAILED,
            f"verification failed: the layout is {_pairs(wanted)} but the GPU has {_pairs(have)}",
        )
    without_ci = [i for i in instances if not i.ci_ids]
    if without_ci:
        names = ", ".join(f"{i.gi_id} ({i.profile} at slice {i.start})" for i in without_ci)
        return result(
            STATE_FAILED, f"verification failed: GPU instances without a compute instance: {names}"
        )
    kept = len(instances) - created
    if not attempted:
        return result(STATE_SUCCESS, f"already applied ({_count(len(instances))})")
    return result(
        STATE_SUCCESS,
        f"created {created}, destroyed {destroyed}, kept {kept} GPU instance"
        + ("" if kept == 1 else "s"),
    )


def _pairs(pairs: Sequence[tuple[str, int]]) -> str:
    if not pairs:
        return "empty"
    return ", ".join(f"{profile}@{start}" for profile, start in sorted(pairs, key=lambda p: p[1]))


def _count(number: int) -> str:
    return f"{number} GPU instance" + ("" if number == 1 else "s")

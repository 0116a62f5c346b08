"""The MIG catalogue and the layout check, for any signed-in user.

``GET /api/v1/mig/models/`` lists the GPU models and their profiles; ``POST
/api/v1/mig/validate/`` checks a layout (a list of instances, or a config of a mig-parted file)
for one GPU model: 200 with the placements, or 400 naming every broken rule.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.limits import BodyLimit
from core.api.parsers import JSONParser
from core.errors import ValidationFailed
from gpu_agent.api.serializers import (
    PASTED_CONFIG_MAX_BYTES,
    PASTED_CONFIG_MAX_NODES,
    VALIDATE_BODY_MAX_BYTES,
    GpuModelOutput,
    MigValidateInput,
    MigValidateOutput,
)
from gpu_spec.mig.catalogue import GpuModel, load_catalogue
from gpu_spec.mig.config import ConfigError, parse_mig_parted_config, validate_config
from gpu_spec.mig.layout import InstanceRequest, validate_layout

CONFIG_FIELD = "mig_parted_config"


def _model(name: str) -> GpuModel:
    catalogue = load_catalogue()
    model = catalogue.find_model(name)
    if model is None:
        raise ValidationFailed.for_field(
            "gpu_model",
            f"{name} is not a GPU model in the MIG catalogue; it has "
            + ", ".join(catalogue.model_names()),
        )
    return model


def _refusal(model: GpuModel, fields: dict[str, list[str]], rules: list[str]) -> ValidationFailed:
    messages = [m for ms in fields.values() for m in ms]
    return ValidationFailed(
        f"Not a valid MIG layout on {model.name}: " + "; ".join(messages),
        fields=fields,
        rules=rules,
    )


def _config_field(path: str) -> str:
    return f"{CONFIG_FIELD}.{path}" if path else CONFIG_FIELD


class MigModelListView(APIView):
    """Every GPU model in the MIG catalogue with its profiles: sizes, valid placements, NVML
    ids, and which facts are confirmed and which inferred."""

    @extend_schema(responses=GpuModelOutput(many=True))
    def get(self, request: Request) -> Response:
        return Response(GpuModelOutput(load_catalogue().models(), many=True).data)


class MigValidateView(BodyLimit, APIView):
    """Check a MIG layout for one GPU model, storing nothing."""

    parser_classes = [JSONParser]  # a list of instances has no form encoding
    body_max_bytes = VALIDATE_BODY_MAX_BYTES

    @extend_schema(
        request=MigValidateInput,
        responses={
            200: MigValidateOutput,
            413: OpenApiResponse(
                description=f"The body is over {VALIDATE_BODY_MAX_BYTES} bytes; nothing was read."
            ),
            400: OpenApiResponse(
                description="Bad input, or a layout that breaks MIG rules: `fields` names each "
                '(`instances[1].start`, `mig_parted_config.mig-configs["x"][0].mig-devices`) '
                "and `extra.rules` lists the rules broken."
            ),
        },
        description="Give `instances` (profiles, optional starts) or `mig_parted_config` (a "
        "mig-parted file) with `config` (one of its configs). 200: where each instance goes. "
        "400: every broken rule: unknown-profile, invalid-start, overlap, max-count, "
        "media-extensions, compute-slices, memory-slices, no-room.",
    )
    def post(self, request: Request) -> Response:
        data = MigValidateInput(data=request.data)
        data.is_valid(raise_exception=True)
        v: dict[str, Any] = data.validated_data
        model = _model(v["gpu_model"])
        if "instances" in v:
            return self._instances(model, v["instances"])
        return self._config(model, v[CONFIG_FIELD], v["config"])

    def _instances(self, model: GpuModel, instances: list[dict[str, Any]]) -> Response:
        result = validate_layout(
            model, [InstanceRequest(i["profile"], i.get("start")) for i in instances]
        )
        if not result.ok:
            fields: dict[str, list[str]] = {}
            for issue in result.issues:
                fields.setdefault(issue.path, []).append(issue.message)
            raise _refusal(model, fields, result.rules_broken)
        body = {"valid": True, "gpu_model": model.name, "placements": result.placements}
        return Response(MigValidateOutput(body).data)

    def _config(self, model: GpuModel, text: str, name: str) -> Response:
        try:
            parsed = parse_mig_parted_config(
                text, max_bytes=PASTED_CONFIG_MAX_BYTES, max_nodes=PASTED_CONFIG_MAX_NODES
            )
        except ConfigError as exc:
            fields: dict[str, list[str]] = {}
            for problem in exc.problems:
                fields.setdefault(_config_field(problem.path), []).append(problem.message)
            raise ValidationFailed(
                "The mig-parted config cannot be read: " + str(exc), fields=fields
            ) from exc
        if name not in parsed.configs:
            raise ValidationFailed.for_field(
                "config", f"The file has no config {name}; it has {', '.join(parsed.configs)}."
            )
        check = validate_config(parsed, name, model)
        if not check.ok:
            fields = {}
            for problem in check.problems:
                messages = fields.setdefault(_config_field(problem.path), [])
                if problem.message not in messages:
                    messages.append(problem.message)
            rules = sorted(
                {
                    issue.rule
                    for entry in check.entries
                    if entry.layout is not None
                    for issue in entry.layout.issues
                }
            )
            raise _refusal(model, fields, rules)
        entries = [
            {
                "path": e.entry.path,
                "devices": e.entry.devices,
                "device_filter": list(e.entry.device_filter),
                "mig_enabled": e.entry.mig_enabled,
                "placements": e.layout.placements if e.layout is not None else [],
            }
            for e in check.entries
        ]
        body = {"valid": True, "gpu_model": model.name, "config": name, "entries": entries}
        return Response(MigValidateOutput(body).data)

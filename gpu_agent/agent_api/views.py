"""Thin views: validate the body, call one service or selector, serialize the answer.

Agents (``agent/...``) authenticate with their node token only; admins' fleet endpoints
(``nodes/...``, ``gpus/...``) take the API's usual user authentication and platform admins only.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django_filters import rest_framework as filters
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.limits import AnonymousBodyLimit
from core.api.serializers import StrictInputSerializer
from core.errors import NotFound, ValidationFailed
from gpu_agent import selectors
from gpu_agent.agent_api.authentication import (
    IsNodeAgent,
    NodeTokenAuthentication,
    NodeTokenWithWorkAuthentication,
    calling_node,
)
from gpu_agent.agent_api.parsers import LimitedJSONParser, check_content_length
from gpu_agent.agent_api.serializers import (
    AgentProbesOutput,
    DesiredOutput,
    IsolationPairOutput,
    JoinTokenInput,
    JoinTokenOutput,
    LayoutInput,
    LayoutOutput,
    NodeDetailOutput,
    NodeOutput,
    ProbeOutput,
    ProbeRequestInput,
    ProbeResultInput,
    ProbeResultOutput,
    RegisterInput,
    RegisterOutput,
    ReportChangesOutput,
    ReportOutput,
    ResultInput,
    ResultOutput,
    TokenRevokeOutput,
    report_request_schema,
)
from gpu_agent.models import Node
from gpu_agent.services import layouts, nodes, reports
from gpu_agent.services.probes import (
    agent_probe_result,
    agent_probes,
    isolation_pairs,
    probe_list,
    probe_request,
    probe_tenant_named,
)
from quotas.models import Cluster
from tenants.api.base import IsPlatformAdmin, caller

AGENT_ERRORS = {
    400: OpenApiResponse(description="Malformed body; the fields say which and why."),
    401: OpenApiResponse(description="Unknown or revoked node token."),
    403: OpenApiResponse(description="The token's node is not the one named (node or GPU)."),
    413: OpenApiResponse(description="The body is larger than 1 MiB; nothing was stored."),
}
ADMIN_ERRORS = {
    400: OpenApiResponse(description="Bad input; the fields say which and why."),
    401: OpenApiResponse(description="Not signed in."),
    403: OpenApiResponse(description="Only platform admins may do this."),
    404: OpenApiResponse(description="No such node or GPU."),
}


class NoInput(StrictInputSerializer):
    """An action that takes no fields (``{}`` or no body); anything else is refused."""


class AgentView(APIView):
    """Base of the agent endpoints: node tokens only, JSON bodies of at most 1 MiB."""

    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNodeAgent]
    parser_classes = [LimitedJSONParser]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        check_content_length(request)  # before anything reads the body
        super().initial(request, *args, **kwargs)


class AgentRegisterView(AnonymousBodyLimit, AgentView):
    """Exchange a one-time join token, or in a cluster the agent pod's ServiceAccount token (its
    cluster's TokenReview vouches for it), for the node's token (shown once, stored hashed).
    Open to anyone holding either, so its body is at most ``ANONYMOUS_BODY_MAX_BYTES``."""

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]

    @extend_schema(
        request=RegisterInput,
        responses={
            201: RegisterOutput,
            400: AGENT_ERRORS[400],
            401: OpenApiResponse(
                description="Unknown, used or expired join token; a ServiceAccount token the "
                "cluster does not accept, or not for the portal's audience."
            ),
            403: OpenApiResponse(
                description="A ServiceAccount token of another account, of a pod on another "
                "node than the one named, or of a node that is not a GPU node of the cluster "
                "(or that the portal has in another cluster)."
            ),
            413: OpenApiResponse(description="The body is larger than 16 KiB; nothing was read."),
            503: OpenApiResponse(
                description="The cluster could not be asked about the ServiceAccount token."
            ),
        },
        auth=[],
    )
    def post(self, request: Request) -> Response:
        data = RegisterInput(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        if v.get("service_account_token"):
            node, secret = nodes.agent_register_in_cluster(
                service_account_token=v["service_account_token"],
                cluster_name=v["cluster"],
                node_claim=v["node"],
                hostname=v["hostname"],
                agent_version=v["agent_version"],
            )
        else:
            node, secret = nodes.agent_register(
                join_secret=v["join_token"],
                hostname=v["hostname"],
                agent_version=v["agent_version"],
                agent_key=v["agent_key"],
            )
        return Response(
            RegisterOutput({"node": node.name, "node_token": secret}).data,
            status=status.HTTP_201_CREATED,
        )


class AgentReportView(AgentView):
    """What the node has: GPUs, MIG instances, processes. Stored whole or not at all."""

    authentication_classes = [NodeTokenWithWorkAuthentication]

    @extend_schema(
        request=report_request_schema(), responses={200: ReportChangesOutput, **AGENT_ERRORS}
    )
    def post(self, request: Request) -> Response:
        node = calling_node(request)
        report = reports.report_validated(node=node, data=request.data)  # the agent's schema
        answer = reports.report_ingest(node=node, report=report)
        data: dict[str, Any] = {
            "desired_generation": answer.desired_generation,
            "probes": answer.probes,
        }
        if report.get("protocol") != reports.PROTOCOL_CHANGES:
            return Response(ReportOutput(data).data)  # protocol 1: the answer it always had
        data.update(
            ack=answer.ack,
            full_report=answer.full_report,
            sample_every_s=settings.USAGE_AGENT_SAMPLE_EVERY_S,
        )
        return Response(ReportChangesOutput(data).data)


class AgentDesiredView(AgentView):
    """The node's GPUs with a desired MIG layout to apply (pending, not draining)."""

    @extend_schema(responses={200: DesiredOutput, 401: AGENT_ERRORS[401], 403: AGENT_ERRORS[403]})
    def get(self, request: Request) -> Response:
        node = calling_node(request)
        gpus = layouts.agent_desired(node=node)
        return Response(DesiredOutput({"node": node.name, "gpus": gpus}).data)


class AgentResultView(AgentView):
    """The outcome of applying a desired layout. Results for older generations are ignored."""

    @extend_schema(
        request=ResultInput,
        responses={
            200: ResultOutput,
            **AGENT_ERRORS,
            404: OpenApiResponse(description="No such GPU has been reported."),
        },
    )
    def post(self, request: Request) -> Response:
        data = ResultInput(data=request.data)
        data.is_valid(raise_exception=True)
        outcome = layouts.agent_result(node=calling_node(request), **data.validated_data)
        return Response(ResultOutput(outcome).data)


class AgentProbesView(AgentView):
    """The isolation probes the node's agent has to run (requested or running)."""

    @extend_schema(
        responses={200: AgentProbesOutput, 401: AGENT_ERRORS[401], 403: AGENT_ERRORS[403]}
    )
    def get(self, request: Request) -> Response:
        node = calling_node(request)
        return Response(
            AgentProbesOutput({"node": node.name, "probes": agent_probes(node=node)}).data
        )


class AgentProbeResultView(AgentView):
    """A probe's progress (running) or outcome (done with both times, skipped, failed)."""

    @extend_schema(
        parameters=[OpenApiParameter("id", int, OpenApiParameter.PATH, description="Probe id.")],
        request=ProbeResultInput,
        responses={
            200: ProbeResultOutput,
            **AGENT_ERRORS,
            404: OpenApiResponse(description="No such probe."),
        },
    )
    def post(self, request: Request, id: int) -> Response:
        data = ProbeResultInput(data=request.data)
        data.is_valid(raise_exception=True)
        outcome = agent_probe_result(node=calling_node(request), probe_id=id, **data.validated_data)
        return Response(ProbeResultOutput(outcome).data)


class NodeFilter(filters.FilterSet):
    cluster = filters.CharFilter(field_name="cluster__name")
    stale = filters.BooleanFilter()

    class Meta:
        model = Node
        fields = ["cluster", "stale"]


class NodeViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """GPU nodes and their agents (platform admins only)."""

    serializer_class = NodeOutput
    queryset = Node.objects.none()  # for the schema; get_queryset() reads through the selector
    permission_classes = [IsPlatformAdmin]
    lookup_field = "name"
    lookup_value_regex = "[a-z0-9.-]+"  # Kubernetes node names: DNS-1123 subdomains, dots too
    filterset_class = NodeFilter

    def get_queryset(self) -> Any:
        return selectors.node_list(user=caller(self.request))

    @extend_schema(responses={200: NodeDetailOutput, **ADMIN_ERRORS})
    def retrieve(self, request: Request, name: str) -> Response:
        """A node with its GPUs, their MIG instances and current desired layouts."""
        node = selectors.node_get(user=caller(request), name=name)
        return Response(NodeDetailOutput(node).data)

    @extend_schema(
        request=JoinTokenInput,
        responses={201: JoinTokenOutput, **ADMIN_ERRORS},
        description="A one-time join token for a node name (a new node, or one re-installing "
        "its agent: registering again revokes the node's earlier tokens). Shown once.",
    )
    @action(detail=False, methods=["post"], url_path="join-tokens")
    def join_tokens(self, request: Request) -> Response:
        data = JoinTokenInput(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        cluster = None
        if "cluster" in v:
            cluster = Cluster.objects.filter(name=v["cluster"]).first()
            if cluster is None:
                raise ValidationFailed.for_field("cluster", f"No cluster {v['cluster']!r}.")
        token, secret = nodes.join_token_create(
            node_name=v["node"],
            actor=caller(request),
            ttl=timedelta(seconds=v["ttl_s"]) if "ttl_s" in v else None,
            cluster=cluster,
        )
        body = {
            "node": token.node_name,
            "join_token": secret,
            "prefix": token.prefix,
            "expires_at": token.expires_at,
        }
        return Response(JoinTokenOutput(body).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: TokenRevokeOutput, **ADMIN_ERRORS})
    @action(detail=True, methods=["post"], url_path="tokens/revoke")
    def revoke_tokens(self, request: Request, name: str) -> Response:
        """Revoke every token of the node: its agent answers 401 until it registers again."""
        NoInput(data=request.data).is_valid(raise_exception=True)
        node = selectors.node_get(user=caller(request), name=name)
        count = nodes.node_token_revoke(node=node, actor=caller(request))
        return Response(TokenRevokeOutput({"node": node.name, "revoked": count}).data)


UUID_PARAMETER = OpenApiParameter(
    "uuid", str, OpenApiParameter.PATH, description="The GPU's NVML UUID (GPU-...)."
)


class GpuLayoutView(APIView):
    """A GPU's desired MIG layout (platform admins only)."""

    permission_classes = [IsPlatformAdmin]

    @extend_schema(
        parameters=[UUID_PARAMETER],
        responses={200: LayoutOutput, **ADMIN_ERRORS},
        description="The GPU's latest desired layout and its state (404 when none was set).",
    )
    def get(self, request: Request, uuid: str) -> Response:
        gpu = selectors.gpu_get(user=caller(request), uuid=uuid)
        layout = gpu.current_layout  # type: ignore[attr-defined]
        if layout is None:
            raise NotFound(f"No desired layout has been set for GPU {gpu.uuid}.")
        return Response(LayoutOutput(layout).data)

    @extend_schema(
        parameters=[UUID_PARAMETER],
        request=LayoutInput,
        responses={
            200: LayoutOutput,
            **ADMIN_ERRORS,
            409: OpenApiResponse(
                description="The layout would destroy a busy instance (named, with its "
                "processes); send drain: true to queue it until they are idle."
            ),
        },
        description="Set the GPU's desired layout: checked against the GPU model's MIG "
        "placement rules (400 naming instances[i].field and the rule), then pending for the "
        "node's agent with the next generation and a deadline.",
    )
    def put(self, request: Request, uuid: str) -> Response:
        gpu = selectors.gpu_get(user=caller(request), uuid=uuid)
        data = LayoutInput(data=request.data)
        data.is_valid(raise_exception=True)
        layout = layouts.layout_set(
            gpu=gpu,
            instances=data.validated_data["instances"],
            actor=caller(request),
            drain=data.validated_data["drain"],
            mig_enabled=data.validated_data["mig_enabled"],
        )
        return Response(LayoutOutput(layout).data)


class GpuProbeView(APIView):
    """A GPU's isolation probes (R30; platform admins only)."""

    permission_classes = [IsPlatformAdmin]

    @extend_schema(
        parameters=[UUID_PARAMETER],
        responses={200: ProbeOutput(many=True), **ADMIN_ERRORS},
        description="The GPU's latest isolation probes, newest first.",
    )
    def get(self, request: Request, uuid: str) -> Response:
        gpu = selectors.gpu_get(user=caller(request), uuid=uuid)
        return Response(ProbeOutput(probe_list(gpu=gpu), many=True).data)

    @extend_schema(
        parameters=[UUID_PARAMETER],
        request=ProbeRequestInput,
        responses={
            201: ProbeOutput,
            **ADMIN_ERRORS,
            409: OpenApiResponse(
                description="The node is stale, or a probe of the GPU is still open."
            ),
        },
        description="Ask the node's agent to probe the GPU's isolation: a compute-bound kernel "
        "on one MIG instance alone, then beside a saturating neighbour on another (two "
        "processes on a GPU without MIG). 400 for a MIG GPU with fewer than two instances.",
    )
    def post(self, request: Request, uuid: str) -> Response:
        gpu = selectors.gpu_get(user=caller(request), uuid=uuid)
        data = ProbeRequestInput(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        for name in ("target_tenant", "neighbour_tenant"):
            fields[name] = probe_tenant_named(field=name, slug=fields.get(name))
        probe = probe_request(gpu=gpu, actor=caller(request), **fields)
        return Response(ProbeOutput(probe).data, status=status.HTTP_201_CREATED)


class IsolationPairsView(APIView):
    """The isolation check per pair of tenants (platform admins only)."""

    permission_classes = [IsPlatformAdmin]

    @extend_schema(
        responses={200: IsolationPairOutput(many=True), **ADMIN_ERRORS},
        description="Per pair of tenants, the latest isolation probe that saturated tenant "
        "A's share of a GPU (its MIG instance or time slice) while tenant B's ran: B's "
        "slowdown against the 5 % line, on which GPU and when. Probes of the fake backend "
        "are simulated (simulated: true).",
    )
    def get(self, request: Request) -> Response:
        return Response(IsolationPairOutput(isolation_pairs(), many=True).data)

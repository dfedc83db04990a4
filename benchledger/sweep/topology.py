"""Where the processes of an arm's deployment run and how each one is reached.

An arm is served by its head (the arm's own server, on the arm's `node`: it serves the API
that is measured) and, for a model that spans nodes, one more process on each node its
`[[arms.processes]]` names. This module turns an arm into that list of nodes, spells the
commands of the extra processes and the telemetry URL of every node; nothing here starts
or reads anything (benchledger.restart.deployment and benchledger.server.telemetry do).

A process's command may use these tokens, replaced as plain text (nothing else in it is
interpreted, as for the head's `{port}`):

    {head_address}  the head's address        {head_port}  the head's API port
    {head_url}      http://{head_address}:{head_port}
    {address}       this process's address    {port}       a free port on its node
    {rank}          its rank (head 0, then 1, 2, ... in the order of [[arms.processes]])
    {nnodes}        how many nodes the deployment spans

The head's own command gets {port} (as every command arm's does) and, when the arm spans
nodes, {address}, {rank} (0) and {nnodes} too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from benchledger.sweep.spec import DEFAULT_DCGM_URL, Arm, ArmPlan, NodeProcess

Role = Literal["head", "node"]
HEAD: Role = "head"
NODE: Role = "node"
PROCESS_TOKENS = ("{head_address}", "{head_port}", "{head_url}", "{address}", "{port}",
                  "{rank}", "{nnodes}")
# What a telemetry URL (clock_url) may use, per node of the deployment.
TELEMETRY_TOKENS = ("{base_url}", "{address}", "{node}")


@dataclass(frozen=True)
class DeploymentNode:
    """One node of an arm's deployment and the process benchledger runs there."""

    node: str  # the sweep's name for it: its Airflow queue
    address: str  # how the other nodes (and the measuring client) reach it
    role: Role
    rank: int  # 0 for the head, then 1, 2, ... in the order of [[arms.processes]]
    process: NodeProcess | None  # None for the head

    @property
    def is_head(self) -> bool:
        return self.role == HEAD


def deployment(arm: Arm) -> list[DeploymentNode]:
    """Every node the arm's deployment spans, the head first."""
    nodes = [DeploymentNode(arm.node, arm.head_address, HEAD, 0, None)]
    nodes += [DeploymentNode(p.node, p.address or p.node, NODE, rank, p)
              for rank, p in enumerate(arm.processes, start=1)]
    return nodes


def node_of(arm: Arm, node: str) -> DeploymentNode:
    for member in deployment(arm):
        if member.node == node:
            return member
    raise KeyError(f"arm {arm.name!r} spans no node {node!r} "
                   f"(its nodes: {[m.node for m in deployment(arm)]})")


def substitute(text: str, values: dict[str, str]) -> str:
    """`text` with each {token} of `values` replaced; every other brace stays as written."""
    for token, value in values.items():
        text = text.replace(token, value)
    return text


def process_values(member: DeploymentNode, nnodes: int, head_address: str,
                   head_port: int | None, port: int | None) -> dict[str, str]:
    """The tokens of PROCESS_TOKENS as they read for one process of the deployment."""
    values = {"{address}": member.address, "{rank}": str(member.rank),
              "{nnodes}": str(nnodes), "{head_address}": head_address}
    if head_port is not None:
        values |= {"{head_port}": str(head_port),
                   "{head_url}": f"http://{head_address}:{head_port}"}
    if port is not None:
        values["{port}"] = str(port)
    return values


def serves_http(arm: Arm, member: DeploymentNode) -> bool:
    """Whether the process on this node serves HTTP benchledger can reach (its own base
    URL): the head always (it serves the API), a simulator's pretend node, and a command
    process whose command takes a {port} (an external arm's other nodes are only named)."""
    if member.is_head or member.process is None:  # the head: it serves the API
        return True
    return arm.process_serves_http(member.process)


def telemetry_url(plan: ArmPlan, member: DeploymentNode, base_url: str | None) -> str | None:
    """Where this node's GPU telemetry is read (clock_source http or dcgm), or None for a
    source that is not a URL. `base_url`: the node's own process's (None: it serves none;
    a URL that needs one was refused when the sweep was read)."""
    if plan.clock_source not in ("http", "dcgm"):
        return None
    template = plan.clock_url or DEFAULT_DCGM_URL
    if "{base_url}" in template and not base_url:
        return None  # the node's process serves nothing: refused at parse, or it never ran
    values = {"{address}": member.address, "{node}": member.node,
              "{base_url}": (base_url or "").rstrip("/")}
    return substitute(template, values)

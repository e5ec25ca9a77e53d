"""The parts of the terminal decision (steps/terminal_decision.py) that read the run: where the budget stands and the
completion proof it lacks (protocol v2's training receipt, or rule (1)'s 'Training done!' for a marker alone), and
what a person should check before calling such a run either way (issue 44 item 4)."""

from __future__ import annotations

from rlcleanup.steps.layout import RunLayout
from rlcleanup.steps.precedence import Decision, Inputs
from rlcleanup.steps.receipts import ProtocolFacts
from rlcleanup.steps.terminal_decision import BudgetStatus, CompletionProof


def completion_proof(protocol: ProtocolFacts | None) -> CompletionProof | None:
    """The completion proof protocol v2 requires (run-layout-v2.md §2: "v2 training exports nothing, success = valid
    receipt"), as read; None where the run follows no protocol that owes one."""
    receipt = protocol.training if protocol is not None else None
    if receipt is None:
        return None
    detail = "; ".join(receipt.reasons)
    missing = any(reason.endswith("receipt absent") for reason in receipt.reasons)  # formats/protocol._parse_receipt
    return CompletionProof(
        name="the training receipt", uri=receipt.uri, valid=receipt.valid, missing=missing, detail=detail
    )


def proof_lacking(proof: CompletionProof | None) -> str:
    return proof.lacking() if proof is not None and not proof.valid else ""


def budget_status(
    inputs: Inputs, precedence: Decision, protocol: ProtocolFacts | None
) -> tuple[BudgetStatus, CompletionProof | None]:
    """Where the budget stands, and the proof completion still lacks when the artifacts reach it."""
    if not inputs.budget_reached:
        return (BudgetStatus.unknown if inputs.budget is None else BudgetStatus.not_reached), None
    if inputs.proof_lacking:
        return BudgetStatus.reached_unproven, completion_proof(protocol)
    if precedence.budget_confirmed:
        return BudgetStatus.reached, None
    # Rule (1)'s gate: a marker alone with no controller verdict needs 'Training done!' besides.
    done_line = CompletionProof(
        name="the trainer's 'Training done!' line",
        required_by="rule (1), for a marker alone with no controller verdict,",
        valid=False,
        missing=True,
        detail="not logged",
    )
    return BudgetStatus.reached_unproven, done_line


def person_checks(layout: RunLayout, status: BudgetStatus, proof: CompletionProof | None) -> list[str]:
    """What a person should look at before calling an unproven completion either way."""
    if status is not BudgetStatus.reached_unproven or proof is None:
        return []
    marker = layout.marker_step
    checkpoint = f"{layout.checkpoints_root}/global_step_{marker}" if marker is not None else "the marker's checkpoint"
    if proof.name == "the training receipt":
        return [
            f"whether the training attempt wrote {proof.uri} (its log names the receipt_uri; a receipt deleted "
            "since is a storage event) and, if it did not, why the trainer stopped before its completion write; "
            f"meanwhile {checkpoint} and the export at the marker are the run's outputs: confirm both are complete "
            "before treating the run as finished."
        ]
    return [
        f"the last attempt's log for where it stopped (a log cut before 'Training done!' is not a failure), and "
        f"that {checkpoint} is complete, before treating the run as finished."
    ]

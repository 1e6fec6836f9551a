"""The program's collectives: timeouts and the ranks that did not time out (the likely
culprits), stragglers from the watchdog's sequence numbers and Flight Recorder dumps,
collectives that differ between ranks, a hung watchdog, ranks killed by a signal; and
what trainer-launch concluded: the hang report's culprit, its verdict on the workers."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from trainops.doctor import events as ev
from trainops.doctor.events import Event
from trainops.doctor.findings import Context, Found, check, ranks_text, who
from trainops.model import ERROR, WARNING


def _expected_ranks(ctx: Context) -> int | None:
    sizes = [r.nranks for r in ctx.records if r.nranks]
    return max(sizes) if sizes else None


def _last_line(ctx: Context, rank: int) -> str | None:
    lines = [e for r in ctx.records if r.rank == rank for e in r.events]
    return lines[-1].evidence() if lines else None


# ProcessGroupNCCL's default timeout (pytorch v2.13.0 torch/csrc/distributed/c10d/
# ProcessGroupNCCL.hpp kProcessGroupNCCLDefaultTimeout = 10 * 60 * 1000 ms), which
# init_process_group uses for NCCL unless the job gives a timeout of its own.
DEFAULT_NCCL_TIMEOUT_S = 600


@check(
    "collective-timeout",
    ERROR,
    "No collective times out",
    "PyTorch's watchdog ends a collective that ran past the process group timeout; the ranks "
    "that did not time out are the ones the others waited for.",
    "Look first at the ranks that did not time out: their pods' events (OOMKilled, Evicted, "
    "Xid errors on the node), their last log lines, and their network interface. Raise the "
    "timeout only after the path is verified.",
)
def timeout(ctx: Context) -> Iterator[Found]:
    events = ctx.of(ev.WATCHDOG)
    if not events:
        return
    first: dict[int | None, Event] = {}
    for event in events:
        rank, seq = event.rank, event.fields["seq"]
        if rank not in first or (seq is not None and seq < (first[rank].fields["seq"] or seq)):
            first[rank] = event
    chosen = list(first.values())
    ops = defaultdict(list)
    for event in chosen:
        ops[(event.fields["seq"], event.fields["op"])].append(event)
    (seq, op), _ = max(ops.items(), key=lambda item: len(item[1]))
    seconds = max(e.fields["timeout_ms"] for e in chosen) / 1000
    where = f" (SeqNum {seq})" if seq is not None else ""
    expected = _expected_ranks(ctx)
    timed = {r for r in first if r is not None}
    silent = sorted(set(range(expected)) - timed) if expected else []
    # One rank alone in a collective shows in the others going on: they finish, or log
    # training steps later in the same log (line order is time order only within a file).
    [entered] = chosen if len(chosen) == 1 else [None]
    went_on = {
        e.rank
        for e in ctx.of(ev.PROGRESS, ev.FINISHED)
        if entered is not None
        and e.rank is not None
        and e.rank not in timed
        and (e.kind == ev.FINISHED or (e.source == entered.source and e.line > entered.line))
    }
    # A collective that times out on one rank after the training loop ended (the loop's own
    # last line, earlier in the same log) was issued by code after training that not every
    # rank runs.
    ended = [
        e
        for e in ctx.of(ev.LOOP_ENDED)
        if entered is not None and e.source == entered.source and e.line < entered.line
    ]
    if len(timed) <= 1 and ended and entered is not None:
        suspect = (
            f": the training loop had ended before it ({ended[0].where}: {ended[0].text}), so "
            "code after training issued a collective that not every rank runs: a checkpoint "
            "save, test or logging call inside a rank-0-only block (`if trainer.is_global_zero:`"
            ", `if rank == 0:`) that ends in a barrier or all-reduce"
        )
    elif len(timed) == 1 and went_on:
        [alone] = timed
        suspect = (
            f": rank {alone} alone entered it and the other ranks never called it (a "
            "collective on a rank-dependent path such as `if rank == 0: barrier()`, a save or "
            "evaluation step run on one rank, or the others had already finished or crashed)"
        )
    elif len(silent) == 1:
        suspect = (
            f"; rank {silent[0]} reported no timeout: the likely culprit (hung, crashed or behind)"
        )
        last = _last_line(ctx, silent[0])
        if last:
            suspect += f"; its last line: {last}"
    elif silent:
        suspect = (
            f"; ranks {ranks_text(silent)} reported no timeout: the likely culprits "
            "(hung, crashed or behind)"
        )
    else:
        suspect = (
            ": the ranks it waited for never reached this collective in time (a slow, stuck or "
            "crashed rank, or uneven work per rank); their logs show which"
            if expected is None
            else ""
        )
    fix = None
    if seq == 1 and op == "ALLREDUCE" and all(e.fields.get("numel") == 1 for e in chosen):
        # ProcessGroupNCCL runs barrier() as a one-element all-reduce on a device it guesses
        # when the rank has not said which it uses, and warns that a wrong guess can hang.
        suspect += (
            "; it is the group's first collective and a one-element all-reduce, the form "
            "barrier() takes: a barrier before each rank bound its GPU runs on a guessed "
            "device and can hang there"
        )
        fix = (
            "Bind each rank to its GPU before the first collective (torch.cuda.set_device("
            "local_rank), or init_process_group(device_id=...)), and pass "
            "barrier(device_ids=[local_rank]); if the ranks were bound, look at the ranks that "
            "did not time out."
        )
    if seconds < DEFAULT_NCCL_TIMEOUT_S:
        suspect += (
            f"; the process group's timeout, {seconds:g}s, is shorter than PyTorch's defaults "
            f"({DEFAULT_NCCL_TIMEOUT_S // 60} minutes for NCCL in 2.13, 30 minutes in older "
            "releases and for other backends): a rank that is only slow here (data "
            "preparation, a checkpoint or evaluation on one rank) trips it"
        )
        fix = (
            "If one rank was only slow at this collective (its log shows it busy, not stuck), "
            "raise the timeout the job set (init_process_group(timeout=...), new_group) back "
            "toward the default, or move the slow work out of the collective's way; otherwise "
            "look at the ranks that did not time out."
        )
    if ended and entered is not None and len(timed) <= 1:
        fix = (
            "Call what runs after training on every rank (trainer.save_checkpoint, test, "
            "barriers: Lightning writes the file from rank 0 itself), and keep rank-0-only "
            "blocks free of collectives."
        )
    yield Found(
        f"{who(chosen)} timed out after {seconds:g}s in {op}{where}{suspect}",
        chosen,
        fix=fix,
    )


@check(
    "collective-mismatch",
    ERROR,
    "All ranks run the same collectives in the same order",
    "NCCL matches collectives by order; ranks that issue different operations or shapes "
    "deadlock or corrupt data. This is the program, not the network.",
    "Find the code path that depends on the rank or the data (an early exit, an uneven last "
    "batch, logging or parameters used only on some ranks) and make every rank issue the "
    "same collectives.",
)
def mismatch(ctx: Context) -> Iterator[Found]:
    reported = ctx.of(ev.MISMATCH)
    if reported:
        ranks = sorted({r for e in reported for r in e.fields["ranks"]})
        details = sorted({e.fields["detail"] for e in reported if e.fields["detail"]})
        on = f" ranks {ranks_text(ranks)}" if ranks else f" {who(reported)}"
        detail = f": {details[0][:200]}" if details else ""
        yield Found(
            f"ranks issued different collectives ({on.strip()}){detail}", reported, ranks=ranks
        )
        return
    timeouts = ctx.of(ev.WATCHDOG)
    seen = {(e.fields["seq"], e.fields["op"]) for e in timeouts}
    if len({op for _, op in seen}) > 1 or len({s for s, _ in seen}) > 1:
        groups = defaultdict(list)
        for event in timeouts:
            groups[(event.fields["seq"] or 0, event.fields["op"])].append(event)
        detail = "; ".join(
            f"{op} #{seq} on {who(events)}" for (seq, op), events in sorted(groups.items())
        )
        yield Found(f"ranks were in different collectives when they timed out: {detail}", timeouts)
        return
    states = ctx.of(ev.FR_STATE)
    by_seq: dict[tuple[str, int], dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for event in states:
        for seq, op in event.fields["ops"].items():
            by_seq[(event.fields["pg"], seq)][op].append(event.fields["rank"])
    for (pg, seq), ops in sorted(by_seq.items()):
        if len(ops) > 1:
            detail = "; ".join(f"{op} on ranks {ranks_text(r)}" for op, r in sorted(ops.items()))
            yield Found(
                f"Flight Recorder shows different collectives at #{seq} of process group "
                f"{pg}: {detail}",
                states,
            )
            return


@check(
    "collective-straggler",
    ERROR,
    "Every rank reaches each collective",
    "When most ranks wait in a collective that one rank never started, that rank is stuck "
    "elsewhere (data loading, a hung kernel, a dead GPU) and is the one to look at.",
    "Look at the straggler's last lines, its stack (py-spy dump) and its node's kernel log.",
)
def straggler(ctx: Context) -> Iterator[Found]:
    states = [e for e in ctx.of(ev.FR_STATE) if e.fields["rank"] is not None]
    groups = defaultdict(list)
    for event in states:
        groups[event.fields["pg"]].append(event)
    for pg, events in sorted(groups.items()):
        waiting = [e for e in events if e.fields["pending_seq"] is not None]
        if not waiting:
            continue
        target = max(e.fields["pending_seq"] for e in waiting)
        op = next(e.fields["pending_op"] for e in waiting if e.fields["pending_seq"] == target)
        behind = [
            e
            for e in events
            if (e.fields["completed"] or -1) < target - 1
            and (e.fields["pending_seq"] is None or e.fields["pending_seq"] < target)
        ]
        at_target = [e for e in waiting if e.fields["pending_seq"] == target]
        if behind and at_target:
            lagging = ranks_text(e.fields["rank"] for e in behind)
            yield Found(
                f"rank{'s' if len(behind) > 1 else ''} {lagging} never reached collective "
                f"#{target} ({op}) of process group {pg} that ranks "
                f"{ranks_text(e.fields['rank'] for e in at_target)} wait in",
                behind,
            )
    work = ctx.of(ev.WATCHDOG_WORK)
    if work and not states:
        completed = {e.rank: e.fields["completed"] for e in work if e.rank is not None}
        if len(set(completed.values())) > 1:
            low = min(completed.values())
            behind = sorted(r for r, c in completed.items() if c == low)
            ahead = sorted(r for r, c in completed.items() if c != low)
            yield Found(
                f"ranks {ranks_text(behind)} completed only up to work {low} while ranks "
                f"{ranks_text(ahead)} got further: they fell behind",
                [e for e in work if e.rank in behind],
            )


@check(
    "watchdog-stuck",
    ERROR,
    "PyTorch's NCCL watchdog keeps making progress",
    "When the watchdog itself hangs, a CUDA or NCCL call never returned: typically a GPU that "
    "stopped responding or a hung kernel, not the network.",
    "Read the node's kernel log for Xid events and the rank's stack (py-spy dump); drain the "
    "node if its GPU faulted and restart from the last checkpoint.",
)
def heartbeat(ctx: Context) -> Iterator[Found]:
    stuck = ctx.of(ev.HEARTBEAT)
    if stuck and not ctx.of(ev.WATCHDOG):
        seconds = max(e.fields["seconds"] for e in stuck)
        yield Found(
            f"the NCCL watchdog of {who(stuck)} got stuck for {seconds}s: a CUDA or NCCL call hung",
            stuck,
        )


# Who sends torchrun each signal it handles, and what to do about it.
AGENT_SIGNALS = {
    "SIGHUP": (
        "the terminal, SSH or `kubectl exec` session that started it closed (a hangup); "
        "torchrun handles SIGHUP itself (TORCHELASTIC_SIGNALS_TO_HANDLE), so nohup does not "
        "shield it",
        "Start the job detached from the session (tmux, screen, setsid, or `nohup ... & "
        "disown` in bash), or as a scheduled job (a PyTorchJob, a batch job). In a pod, make "
        "torchrun the container's command (as the templates do) rather than starting it "
        "from `kubectl exec`: the exec session's end hangs it up.",
    ),
    "SIGINT": (
        "an interrupt: Ctrl-C in its terminal, or a wrapper that interrupted it",
        "Find what interrupted it (a person, a wrapper's timeout); run it detached from a "
        "terminal.",
    ),
    "SIGTERM": (
        "its pod or job was stopped: deleted, preempted or evicted (the kubelet's SIGTERM), "
        "or a scheduler ended the job (a time limit)",
        "Read the pod's events and the job's conditions (`trainops doctor job`) for who "
        "stopped it: preemption, eviction, a deleted job or a time limit.",
    ),
    "": (
        "something sent it a termination signal",
        "Find the sender of the signal: a scheduler's time limit, a wrapper, a person.",
    ),
}


@check(
    "rank-killed",
    ERROR,
    "No rank is killed by a signal",
    "A rank killed by SIGKILL was usually out of memory (the kernel's OOM killer or the "
    "container's memory limit); its peers then fail or time out.",
    "Check the pod's events for OOMKilled (`trainops doctor job` shows them), raise the memory "
    "limit (memoryPerPod; /dev/shm counts against it) or lower DataLoader workers.",
    secondary=True,
)
def killed(ctx: Context) -> Iterator[Found]:
    by_signal: dict[str, list[Event]] = defaultdict(list)
    for event in ctx.of(ev.AGENT_SIGNAL):
        by_signal[event.fields["signal"]].append(event)
    for name, events in sorted(by_signal.items()):
        why, fix = AGENT_SIGNALS.get(name, AGENT_SIGNALS[""])
        yield Found(f"torchrun got {name} and stopped its workers: {why}", events, fix=fix)
    signals = [
        e
        for e in ctx.of(ev.CHILD_FAILED)
        if e.fields["signal"] == "SIGKILL" or e.fields["exitcode"] == -9
    ]
    oom = [e for e in signals if e.fields.get("oom")]
    if oom:
        yield Found(
            f"the kernel's OOM killer killed a process ({who(oom)}): the node's or the "
            "container's memory ran out",
            oom,
        )
    elif signals:
        yield Found(
            f"a rank was killed by SIGKILL ({who(signals)}): most often the kernel's OOM killer, "
            "when the host's or the container's memory runs out",
            signals,
        )


@check(
    "hang-culprit",
    ERROR,
    "A hang report names the rank the others wait for",
    "The rank whose watchdog fires first in a hung step is often only waiting for the stuck "
    "one. trainer-launch's hang report has every rank of the node say where it was and names "
    "the rank outside any collective while its peers wait inside one.",
    "Read the culprit's stacks (printed after the report) and look at its node: data "
    "loading, a hung kernel or storage I/O on that rank. A culprit 'not on this node' is in "
    "another pod's report; a rank that wrote no report was stuck in native code.",
)
def hang_culprit(ctx: Context) -> Iterator[Found]:
    reports = ctx.of(ev.HANG_REPORT)
    seen = set()
    for event in ctx.of(ev.HANG_CULPRIT):
        detail = event.fields["detail"]
        if detail in seen:
            continue
        seen.add(detail)
        report = next((r for r in reversed(reports) if r.source == event.source), None)
        noticed = ""
        if report is not None and report.fields["first"] is not None:
            noticed = f"; the watchdog of rank {report.fields['first']} fired first"
            if report.fields["step"] is not None:
                noticed += f", at step {report.fields['step']}"
        yield Found(
            f"the hang report names the culprit: {detail}{noticed}",
            [event, *([report] if report is not None else [])],
            ranks=event.fields["culprits"],
        )


@check(
    "launcher-exit",
    ERROR,
    "trainer-launch says how the workers ended",
    "trainer-launch gives each failed rank a cause from its exit status and last lines, and "
    "exits with the code of the most specific one: the code the operator's ExitCode restart "
    "policy acts on (1-127 fails the job, 128-255 restarts it).",
    "A retried cause restarts from the last checkpoint (repeated ones end with exit 6); for a "
    "permanent one fix what its evidence names (docs/runbook.md, 'What is retried').",
)
def launcher_exit(ctx: Context) -> Iterator[Found]:
    groups: dict[tuple, list[Event]] = defaultdict(list)
    spent: dict[int, list[Event]] = {}  # id of a verdict -> the budget lines that end it
    last: dict[str, Event] = {}  # the latest plain verdict of each source
    for event in ctx.of(ev.LAUNCHER_EXIT):
        fields = event.fields
        if fields.get("exhausted"):
            before = last.pop(event.source, None)
            if before is not None:
                spent.setdefault(id(before), []).append(event)
                continue
        else:
            last[event.source] = event
        groups[(fields["code"], fields["cause"], fields["decider"])].append(event)
    for (code, cause, decider), events in groups.items():
        fields = events[0].fields
        who = f"rank {decider}: " if decider is not None else ""
        ends = [e for event in events for e in spent.get(id(event), [])]
        if ends:
            # The retry budget turned a retryable verdict into exit 6: the job fails.
            final = ends[0].fields
            yield Found(
                f"trainer-launch exited {final['code']} ({final['meaning']}): {who}{cause} "
                f"({fields['evidence']}) was {final['evidence']}",
                [*events, *ends],
                severity=ERROR,
                ranks=[decider] if decider is not None else [],
            )
            events = [e for e in events if id(e) not in spent]
            if not events:
                continue
        yield Found(
            f"trainer-launch exited {code} ({fields['meaning']}): {who}{cause} "
            f"({fields['evidence']})",
            events,
            severity=ERROR if code < 128 else WARNING,
            ranks=[decider] if decider is not None else [],
        )

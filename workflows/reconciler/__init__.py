"""The reconciler shell: what every pool kind (DevicePool, BrowserPool) shares.

How a kind plugs in:

1. Its carried state (one pydantic model, handed to the next run whole) has what
   `kind.Carried` names: `generation`, `deleting`, `created_at`, `events`, `status`.
2. Its core is one object per run implementing `kind.Kind`: `observe` → `decide` →
   `act` → `publish` → `wait` for a pass, `tear_down` for the deletion (built on
   `teardown.until_torn_down`, whose steps answer `TeardownBlocked` or `TryAgain`
   until done), and the answers the shell asks of it (`search_attributes`,
   `details`, `carried`, `quiet`, `stop`, `check_replicas`, `rescale`,
   `refuse_scale`). The core reaches the shell through `kind.Host` (the workflow
   object itself): `spec`, `s`, `dirty`, `happened`, `accepted`, `set_condition`,
   `show`, `hand_over_if_due`.
3. Its workflow class subclasses `shell.Reconciler[Spec, State]`; in its
   `@workflow.init` it calls `Reconciler.__init__(self, metadata=, spec=, state=)`
   and sets `self.kind`; its `@workflow.run` awaits `self.reconcile()`. Messages
   whose payload is the kind's own type (`apply(ApplyRequest)`) are two-line
   methods there; scale, wake, and the `status` / `spec` / `events` queries are
   the shell's.

Pure modules (no Temporal): `kind`, `events`, `conditions`, `messages`. The shell
(`shell`, `teardown`, `search_attributes`) holds the Temporal calls.
"""

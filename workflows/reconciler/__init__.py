"""The reconciler shell: what every pool kind (DevicePool, BrowserPool) shares.

How a kind plugs in: docs/architecture.md, 'The reconciler shell: how a kind plugs in'.
Pure modules (no Temporal): `kind`, `events`, `conditions`, `messages`.
"""

"""The BrowserPool resource: BitBrowser desktop browser profiles on tagged node workers.

`api.browserpool.v1beta1` is the stored version (`devicepool.api` exports its
names); `api.browserpool.v1alpha1` is the version DESIGN.md writes, which
applies converted (`api.browserpool.conversion`). Manifests of both kinds load
with `api.loader.load_resources`.
"""

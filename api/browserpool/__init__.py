"""The BrowserPool resource: BitBrowser desktop browser profiles on tagged node workers.

`v1beta1` is the stored version (`devicepool.api` exports its names); `v1alpha1` applies,
converted (`conversion`)."""

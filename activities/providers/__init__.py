"""Provider adapters behind one interface (`base.Provider`); `registry` builds one per account."""

from devicepool.activities.providers.base import (
    PROVIDER_APIS,
    NewDevice,
    Provider,
    ProviderDevice,
)

__all__ = ["PROVIDER_APIS", "NewDevice", "Provider", "ProviderDevice"]

"""Provider adapters behind one interface (`base.Provider`); `registry` builds one per account."""

from devicepool.activities.providers.base import (
    PROVIDER_APIS,
    NewDevice,
    Provider,
    ProviderCall,
    ProviderDevice,
    current_call,
    provider_call,
)

__all__ = [
    "PROVIDER_APIS",
    "NewDevice",
    "Provider",
    "ProviderCall",
    "ProviderDevice",
    "current_call",
    "provider_call",
]

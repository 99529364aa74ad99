"""Provider adapters behind one interface (`base.Provider`); `registry` builds one per account."""

"""Search methods: one contract (:mod:`.base`), a registry and one entry point
(:func:`.run.run`)."""

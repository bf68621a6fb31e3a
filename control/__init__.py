"""The control plane without a screen: config, node handles, the fleet model,
load and engine operations, the demo's wiring.  ``tui/`` draws it; nothing
here imports Textual (docs/design.md, "Layers")."""

"""Learning from use: the events a site reports (impressions, clicks), their store, and later the click model,
judgments from clicks and interleaving. Torch-free and web-free: the gateway only records events."""

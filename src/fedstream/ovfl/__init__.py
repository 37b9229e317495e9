"""Vertical federated learning: parties, messages, protocol and the online simulator."""

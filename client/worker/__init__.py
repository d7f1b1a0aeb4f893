"""The SDK worker's parts behind ``gnomon.client.Worker`` (private: import from gnomon.client)."""

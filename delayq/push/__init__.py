"""Push delivery: messages of subscribed queues POSTed to webhooks when they come due."""

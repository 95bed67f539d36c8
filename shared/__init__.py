"""The library the Cloud Functions share: configuration, Firestore, Slack, Cloud Tasks and the agent."""

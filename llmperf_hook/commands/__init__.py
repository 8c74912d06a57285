"""One module per `llmperf` subcommand, each exposing a click command named `command`."""

from llmperf_hook.cli import main

main()

from agent.cli.main import main

raise SystemExit(main())

from polytrace.cli import main

raise SystemExit(main())

from mneme.app.cli import main

main()

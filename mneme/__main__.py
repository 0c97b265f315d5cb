from mneme.cli import main

main()

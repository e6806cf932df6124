from dupq.cli import main

main()

from mirror.cli import main

main()

from rlightning_cli.main import main

main()

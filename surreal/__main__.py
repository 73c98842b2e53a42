from surreal.cli import main

main()

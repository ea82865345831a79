from milepost.cli import main

main()

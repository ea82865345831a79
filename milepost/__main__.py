from milepost.cli import run

run()

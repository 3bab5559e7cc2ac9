# What a training program's main() uses (fusor/app/): the command-line parser
# with typed, range-checked options and generated --help (issue 18); the strict
# number reading under it and checkpoint metadata read with it.
fusor_add_test_suite(app
  HOST_TESTS
    app/test_command_line.cpp
)

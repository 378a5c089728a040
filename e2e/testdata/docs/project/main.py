print("hello from the project")

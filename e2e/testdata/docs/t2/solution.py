print("solved")

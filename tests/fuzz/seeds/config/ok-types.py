a = 1
b = -2.5e-3
c = 'x'
d = "y\n"
e = True
f = False # c
g = 1_000

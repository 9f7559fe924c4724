module guests

go 1.26

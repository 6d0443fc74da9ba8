module atoll

go 1.26

// The no-op filter: every callback continues.
package main

import _ "guests/abi"

func main() {}

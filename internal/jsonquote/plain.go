package jsonquote

// PlainLen is the length of the longest prefix of s that a JSON string
// holds as is and Append copies as is: ASCII from 0x20 up, but not '"',
// '\\', '<', '>' or '&'. The quoting and scanning loops skip such runs
// with it eight bytes at a time and look at the byte that ends a run one
// by one: export spends a tenth of its CPU in those loops, over texts
// that are almost all plain.
func PlainLen[T ~string | ~[]byte](s T) int {
	const (
		ones = 0x0101010101010101
		high = 0x8080808080808080
	)
	i := 0
	for ; i+8 <= len(s); i += 8 {
		// Loads of eight consecutive bytes combine into one.
		x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		// A byte's high bit in stop is set when the byte is below 0x20
		// (the subtraction borrows into it while its own high bit is
		// clear), is not ASCII, or is one of the five: the classic "has a
		// zero byte" test on x xor the repeated character, '"' (0x22) and
		// '&' (0x26) in one test with bit 2 cleared, '<' (0x3c) and '>'
		// (0x3e) in one with bit 1 cleared. It never misses such a byte;
		// the byte loop below finds which.
		stop := (x-0x20*ones)&^x | x |
			zeroByte((x^'"'*ones)&^(0x04*ones)) | zeroByte((x^'<'*ones)&^(0x02*ones)) |
			zeroByte(x^'\\'*ones)
		if stop&high != 0 {
			break
		}
	}
	for ; i < len(s) && plainByte[s[i]]; i++ {
	}
	return i
}

// zeroByte has the high bit of a byte set when x has a zero byte (it may
// set more than that byte's; PlainLen only asks whether any is set).
func zeroByte(x uint64) uint64 {
	return (x - 0x0101010101010101) &^ x
}

// plainByte: the bytes PlainLen passes.
var plainByte = func() (t [256]bool) {
	for b := 0x20; b < 0x80; b++ {
		t[b] = b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
	}
	return t
}()

package configfile

// KeptValues reports how many values the File keeps, how many of them packed, and
// the bytes they take.
func (f *File) KeptValues() (n, packed, size int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, v := range f.entries {
		n++
		if v.dict != nil {
			packed++
		}
		size += len(v.value)
	}
	return n, packed, size
}

fn main() {
    println!("tally: under construction");
}

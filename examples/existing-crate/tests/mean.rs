#[test]
fn the_mean_of_one_two_three_is_two() {
    assert_eq!(stats::mean(&[1.0, 2.0, 3.0]), Some(2.0));
}

#[test]
fn no_numbers_have_no_mean() {
    assert_eq!(stats::mean(&[]), None);
}

#[test]
fn the_max_is_the_largest() {
    assert_eq!(stats::max(&[1.0, 5.0, 3.0]), Some(5.0));
}
